// Package memlimit sets the process's soft memory limit, from the
// manager's option or the memory limit of the container it runs in: the
// smallest limit of its cgroup and the cgroup's ancestors, in cgroup v2
// (memory.max) or v1 (memory.limit_in_bytes), where the process's own
// /proc says they are mounted. Without a limit, the collector lets the
// heap double between collections, and a cache that lists peaks near
// twice its live heap: in a container whose limit is below that, a kill.
package memlimit

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimitedV1 is where cgroup v1 starts to mean no limit: it reports
// "none" as the largest page-aligned int64 (9223372036854771712).
const unlimitedV1 = 1 << 62

// Container returns the memory limit in bytes of the cgroup the process is
// in, and false if it has none, or none can be read. root is where the
// files are looked for: "/" for the process itself; a test passes a
// directory holding proc/self/cgroup, proc/self/mountinfo and the
// cgroup files they name.
func Container(root string) (int64, bool) {
	groups, err := readCgroups(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	mounts, err := readMounts(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return 0, false
	}
	limit, found := int64(0), false
	lower := func(v int64) {
		if !found || v < limit {
			limit, found = v, true
		}
	}
	for _, m := range mounts {
		var path, file string
		switch {
		case m.fsType == "cgroup2":
			path, file = groups.unified, "memory.max"
			if !groups.hasUnified {
				continue
			}
		case m.fsType == "cgroup" && m.memory:
			path, file = groups.memoryV1, "memory.limit_in_bytes"
			if !groups.hasMemoryV1 {
				continue
			}
		default:
			continue
		}
		// The mount shows the hierarchy from m.root down: the process's
		// cgroup is below it, unless the process sees another namespace's
		// paths, whose nearest part here is the mount itself.
		rel, ok := strings.CutPrefix(path, m.root)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && m.root != "/") {
			rel = ""
		}
		dir := filepath.Join(root, m.point, rel)
		top := filepath.Join(root, m.point)
		for {
			if v, ok := readLimit(filepath.Join(dir, file)); ok {
				lower(v)
			}
			if dir == top || !strings.HasPrefix(dir, top) {
				break
			}
			dir = filepath.Dir(dir)
		}
	}
	return limit, found
}

// readLimit reads a limit file: a number of bytes, or "max" (v2) or a
// huge number (v1) for none.
func readLimit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= unlimitedV1 {
		return 0, false
	}
	return v, true
}

// cgroups is what /proc/self/cgroup says: the process's cgroup in the
// unified (v2) hierarchy and in v1's memory hierarchy.
type cgroups struct {
	unified, memoryV1       string
	hasUnified, hasMemoryV1 bool
}

func readCgroups(path string) (cgroups, error) {
	var g cgroups
	f, err := os.Open(path)
	if err != nil {
		return g, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			g.unified, g.hasUnified = parts[2], true
		case hasField(parts[1], ",", "memory"):
			g.memoryV1, g.hasMemoryV1 = parts[2], true
		}
	}
	return g, sc.Err()
}

// mount is a cgroup filesystem mounted where the process sees it.
type mount struct {
	root, point, fsType string
	memory              bool // a v1 hierarchy with the memory controller
}

func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
		before, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(before), strings.Fields(after)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		m := mount{root: unescape(fields[3]), point: unescape(fields[4]), fsType: tail[0]}
		if m.fsType != "cgroup" && m.fsType != "cgroup2" {
			continue
		}
		m.memory = m.fsType == "cgroup" && hasField(tail[2], ",", "memory")
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes of spaces and the like.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasField(list, sep, want string) bool {
	for _, f := range strings.Split(list, sep) {
		if f == want {
			return true
		}
	}
	return false
}
