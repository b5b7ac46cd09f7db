package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// CPU returns the user+system CPU time the named process of the control
// plane ("kube-apiserver" or "etcd", a child of the controlplane command)
// has used so far, all its threads included. It finds the process anew
// each time, so a restarted API server is read, not its predecessor.
func (cp *ControlPlane) CPU(name string) (time.Duration, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	for _, path := range stats {
		st, err := readStat(path)
		if err != nil {
			continue // the process exited while we looked
		}
		if st.ppid == cp.cmd.Process.Pid && st.comm == name {
			return st.cpu, nil
		}
	}
	return 0, fmt.Errorf("no process %q under the control plane (pid %d)", name, cp.cmd.Process.Pid)
}

// stat is what CPU needs of /proc/<pid>/stat.
type stat struct {
	comm string
	ppid int
	cpu  time.Duration // utime + stime
}

func readStat(path string) (stat, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stat{}, err
	}
	return parseStat(string(data))
}

// parseStat reads "pid (comm) state ppid ... utime stime ...": comm may
// hold spaces and parentheses, so the fields are counted from the last ')'.
func parseStat(s string) (stat, error) {
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return stat{}, fmt.Errorf("malformed stat %q", s)
	}
	f := strings.Fields(s[close+1:]) // f[0] is field 3, state
	if len(f) < 13 {
		return stat{}, fmt.Errorf("malformed stat %q", s)
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return stat{}, fmt.Errorf("malformed stat %q", s)
	}
	return stat{comm: s[open+1 : close], ppid: ppid, cpu: time.Duration(utime+stime) * time.Second / userHZ}, nil
}
