//go:build unix && !linux

package ctrltest

import "syscall"

// sysProcAttr puts a child in its own process group, so that it and anything
// it starts can be signalled together. Only Linux can also tie the child's
// life to its parent's.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
