package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// recordingFleet records what a provider engages and disengages.
type recordingFleet struct {
	mu    sync.Mutex
	calls []string
}

func (f *recordingFleet) Engage(name string, cfg *rest.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "engage "+name+" "+cfg.Host)
	return nil
}

func (f *recordingFleet) Disengage(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "disengage "+name)
}

func (f *recordingFleet) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func kubeconfig(server string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server)
}

// TestKubeconfigDirNames checks which files of the directory name members:
// an editor's backup of east.yaml is not a second east, so east keeps the
// server of east.yaml and is engaged once, over many reads of the
// directory; of two files that both name west, the first serves it.
func TestKubeconfigDirNames(t *testing.T) {
	dir := t.TempDir()
	for file, server := range map[string]string{
		"east.yaml":      "https://east:6443",
		"east.yaml~":     "https://east-old:6443",
		".east.yaml.swp": "https://swap:6443",
		"west.yaml":      "https://west:6443",
		"west.yml":       "https://west-other:6443",
		"north":          "https://north:6443",
	} {
		if err := os.WriteFile(filepath.Join(dir, file), kubeconfig(server), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fleet := &recordingFleet{}
	p := NewDir(dir, time.Millisecond, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx, fleet) }()
	// Many reads of the directory (one a millisecond): a member that
	// flip-flops between two files is engaged again at each.
	for began := time.Now(); len(fleet.snapshot()) < 3 || time.Since(began) < 100*time.Millisecond; {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("after 10s: %v", fleet.snapshot())
		}
		time.Sleep(10 * time.Millisecond) // polling the provider's calls
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := fleet.snapshot()
	want := map[string]bool{"engage east https://east:6443": true, "engage north https://north:6443": true, "engage west https://west:6443": true}
	if len(got) != len(want) {
		t.Fatalf("%d calls, beginning with %q; want each of %v once", len(got), got[:min(len(got), 6)], want)
	}
	for _, c := range got {
		if !want[c] {
			t.Errorf("unexpected call %q; all: %q", c, got)
		}
	}
}
