package ctrl

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// TestMemoryLimit checks where the process's memory limit comes from: the
// option, else the container's limit less a fifth, never for fakes, and
// never when GOMEMLIMIT is set or the option is negative.
func TestMemoryLimit(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"proc/self/mountinfo":      "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/memory.max": "1000000000\n",
	} {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	saved := containerRoot
	defer func() { containerRoot = saved }()
	real := Options{Config: &rest.Config{Host: "https://127.0.0.1:6443"}}
	tests := []struct {
		name     string
		opts     Options
		root     string
		gomemlim string
		want     int64
		wantFrom string
	}{
		{"container", real, root, "", 800000000, "the container's limit, less a fifth"},
		{"no container limit", real, t.TempDir(), "", 0, ""},
		{"option", Options{Config: real.Config, MemoryLimit: 123 << 20}, root, "", 123 << 20, "Options.MemoryLimit"},
		{"option with fakes", Options{FakeClientset: fake.NewClientset(), MemoryLimit: 5 << 20}, root, "", 5 << 20, "Options.MemoryLimit"},
		{"fakes: a test", Options{FakeClientset: fake.NewClientset()}, root, "", 0, ""},
		{"negative", Options{Config: real.Config, MemoryLimit: -1}, root, "", 0, ""},
		{"GOMEMLIMIT wins over the container", real, root, "2GiB", 0, ""},
		{"GOMEMLIMIT wins over the option", Options{Config: real.Config, MemoryLimit: 1 << 30}, root, "2GiB", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tt.gomemlim)
			containerRoot = tt.root
			m := &Manager{opts: tt.opts}
			got, from := m.memoryLimit()
			if got != tt.want || from != tt.wantFrom {
				t.Errorf("got %d from %q, want %d from %q", got, from, tt.want, tt.wantFrom)
			}
		})
	}
}

// TestApplyMemoryLimit checks that the limit reaches the runtime, with the
// proportional pacing off unless GOGC is set.
func TestApplyMemoryLimit(t *testing.T) {
	prevLimit := debug.SetMemoryLimit(-1)
	prevGC := debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prevLimit)
		debug.SetGCPercent(prevGC)
	})
	t.Setenv("GOMEMLIMIT", "")
	for _, tt := range []struct {
		gogc   string
		wantGC int
	}{{"", -1}, {"150", 100}} {
		t.Setenv("GOGC", tt.gogc)
		debug.SetMemoryLimit(math.MaxInt64)
		debug.SetGCPercent(100)
		m := &Manager{opts: Options{FakeClientset: fake.NewClientset(), MemoryLimit: 3 << 30}}
		m.applyMemoryLimit()
		if got := debug.SetMemoryLimit(-1); got != 3<<30 {
			t.Errorf("GOGC=%q: limit %d, want %d", tt.gogc, got, int64(3<<30))
		}
		if got := debug.SetGCPercent(100); got != tt.wantGC {
			t.Errorf("GOGC=%q: GC percent %d, want %d (left as it was when GOGC is set)", tt.gogc, got, tt.wantGC)
		}
	}
}
