package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzKubeconfigDir puts a file of any name and content in a directory of
// kubeconfig files and reads it once: a member is engaged only from a file
// that names one (not hidden, of a kubeconfig's extension), under a name
// that is a DNS label, and only for a kubeconfig that gives a server; no
// input panics.
func FuzzKubeconfigDir(f *testing.F) {
	f.Add("east.yaml", kubeconfig("https://east:6443"))
	f.Add("west", kubeconfig("https://west:6443"))
	f.Add(".east.yaml.swp", kubeconfig("https://swap:6443"))
	f.Add("East.json", []byte(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://e"}}],"contexts":[{"name":"x","context":{"cluster":"c"}}],"current-context":"x"}`))
	f.Add("a.conf", []byte("apiVersion: v1\nkind: Config\ncurrent-context: missing\n"))
	f.Add("b.kubeconfig", []byte("clusters: [{name: c, cluster: {server: 'http://[::1'}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n"))
	f.Add("c.yml", []byte("{{{{"))
	f.Add("d.yaml", []byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file string, data []byte) {
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, "/\x00") || len(file) > 200 {
			return // not a file name
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return
		}
		defer os.Remove(path)
		fleet := &recordingFleet{}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // one read of the directory
		if err := NewDir(dir, time.Hour, false).Run(ctx, fleet); err != nil {
			t.Fatal(err)
		}
		calls := fleet.snapshot()
		if len(calls) == 0 {
			return
		}
		name, ok := memberName(file)
		if !ok || len(calls) != 1 || !strings.HasPrefix(calls[0], "engage "+name+" ") {
			t.Fatalf("file %q: got calls %q, want one engaging the member it names", file, calls)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 || strings.HasPrefix(name, ".") {
			t.Fatalf("file %q: engaged member %q, not a DNS label", file, name)
		}
		if strings.TrimPrefix(calls[0], "engage "+name+" ") == "" {
			t.Fatalf("file %q: engaged %q without a server", file, name)
		}
	})
}
