package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memCgroup is a memory cgroup of the driver's with a limit: a container
// of that size for one controller process, which the library reads as its
// container's limit. cgroup v1 (under the driver's own memory cgroup) or
// v2 (under the root of the unified hierarchy).
type memCgroup struct {
	dir string
	v2  bool
}

func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	g := &memCgroup{}
	if dir, ok := v1MemoryDir(); ok {
		g.dir = filepath.Join(dir, name)
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		g.dir, g.v2 = filepath.Join("/sys/fs/cgroup", name), true
	} else {
		return nil, fmt.Errorf("no memory cgroup to create %s in", name)
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, err
	}
	file := "memory.limit_in_bytes"
	if g.v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// v1MemoryDir is the driver's own cgroup in v1's memory hierarchy.
func v1MemoryDir() (string, bool) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && parts[1] == "memory" {
			dir := filepath.Join("/sys/fs/cgroup/memory", parts[2])
			if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
				return dir, true
			}
		}
	}
	return "", false
}

// wrap returns the command that runs bin with args inside the cgroup: a
// shell that moves itself in, then becomes bin, so that every byte of the
// process is the cgroup's.
func (g *memCgroup) wrap(bin string, args []string) (string, []string) {
	return "/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(g.dir, "cgroup.procs"), bin}, args...)
}

// peak is the most memory the cgroup was charged, in bytes.
func (g *memCgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if g.v2 {
		file = "memory.peak"
	}
	data, _ := os.ReadFile(filepath.Join(g.dir, file))
	v, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return v
}

// oomKills is how many processes the kernel killed for the limit.
func (g *memCgroup) oomKills() int {
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	data, _ := os.ReadFile(filepath.Join(g.dir, file))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func (g *memCgroup) remove() { _ = os.Remove(g.dir) }
