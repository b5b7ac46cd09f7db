package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestContainer(t *testing.T) {
	const (
		v2Mount   = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		v1Memory  = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
		v1CPU     = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
		unlimited = "9223372036854771712"
	)
	tests := []struct {
		name      string
		cgroup    string
		mountinfo string
		files     map[string]string // under the root
		want      int64             // 0: none
	}{
		{
			name:      "v2 with a cgroup namespace",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "536870912\n"},
			want:      512 << 20,
		},
		{
			name:      "v2 without a limit",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "max\n"},
		},
		{
			name:      "v2 nested: the smallest limit above",
			cgroup:    "0::/kubepods/pod1/ctr\n",
			mountinfo: v2Mount,
			files: map[string]string{
				"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
				"sys/fs/cgroup/kubepods/pod1/memory.max":     "1073741824\n",
				"sys/fs/cgroup/kubepods/memory.max":          "8589934592\n",
			},
			want: 1 << 30,
		},
		{
			name:      "v1 in a container without a cgroup namespace",
			cgroup:    "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
			mountinfo: "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"},
			want:      256 << 20,
		},
		{
			name:      "v1 unlimited",
			cgroup:    "4:memory:/\n",
			mountinfo: v1CPU + v1Memory,
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": unlimited + "\n"},
		},
		{
			name:      "v1 on the host, nested under an unlimited parent",
			cgroup:    "4:memory:/process_api/c632/bench\n0::/\n",
			mountinfo: v1CPU + v1Memory + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			files: map[string]string{
				"sys/fs/cgroup/memory/process_api/c632/bench/memory.limit_in_bytes": "3000000000\n",
				"sys/fs/cgroup/memory/process_api/c632/memory.limit_in_bytes":       unlimited + "\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":                        unlimited + "\n",
			},
			want: 3000000000,
		},
		{
			name:      "mount point with an escaped space",
			cgroup:    "0::/\n",
			mountinfo: `30 23 0:26 / /sys/fs/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
			files:     map[string]string{"sys/fs/my cgroup/memory.max": "1048576"},
			want:      1 << 20,
		},
		{
			name:      "no cgroup files",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
		},
		{
			name:      "no memory controller mounted",
			cgroup:    "4:memory:/\n",
			mountinfo: v1CPU,
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "1048576"},
		},
		{
			name:      "garbage",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "lots"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/self/cgroup": tt.cgroup, "proc/self/mountinfo": tt.mountinfo}
			for k, v := range tt.files {
				files[k] = v
			}
			for name, content := range files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := Container(root)
			if !ok {
				got = 0
			}
			if got != tt.want {
				t.Errorf("got %d (found %v), want %d", got, ok, tt.want)
			}
		})
	}
	t.Run("no proc", func(t *testing.T) {
		if v, ok := Container(t.TempDir()); ok {
			t.Errorf("got %d, want none", v)
		}
	})
}
