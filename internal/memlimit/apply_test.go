package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

// TestChoose checks where the process's memory limit comes from: the
// option, else the container's limit less a fifth, never for fakes, and
// never when GOMEMLIMIT is set or the option is negative.
func TestChoose(t *testing.T) {
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
	tests := []struct {
		name     string
		option   int64
		fakes    bool
		root     string
		gomemlim string
		want     int64
		wantFrom string
	}{
		{"container", 0, false, root, "", 800000000, "the container's limit, less a fifth"},
		{"no container limit", 0, false, t.TempDir(), "", 0, ""},
		{"option", 123 << 20, false, root, "", 123 << 20, "Options.MemoryLimit"},
		{"option with fakes", 5 << 20, true, root, "", 5 << 20, "Options.MemoryLimit"},
		{"fakes: a test", 0, true, root, "", 0, ""},
		{"negative", -1, false, root, "", 0, ""},
		{"GOMEMLIMIT wins over the container", 0, false, root, "2GiB", 0, ""},
		{"GOMEMLIMIT wins over the option", 1 << 30, false, root, "2GiB", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tt.gomemlim)
			containerRoot = tt.root
			got, from := choose(tt.option, tt.fakes)
			if got != tt.want || from != tt.wantFrom {
				t.Errorf("got %d from %q, want %d from %q", got, from, tt.want, tt.wantFrom)
			}
		})
	}
}

// TestApply checks that the limit reaches the runtime, with the
// proportional pacing off unless GOGC is set.
func TestApply(t *testing.T) {
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
		Apply(3<<30, true, logr.Discard())
		if got := debug.SetMemoryLimit(-1); got != 3<<30 {
			t.Errorf("GOGC=%q: limit %d, want %d", tt.gogc, got, int64(3<<30))
		}
		if got := debug.SetGCPercent(100); got != tt.wantGC {
			t.Errorf("GOGC=%q: GC percent %d, want %d (left as it was when GOGC is set)", tt.gogc, got, tt.wantGC)
		}
	}
}
