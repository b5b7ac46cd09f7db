package ctrltest

import "syscall"

// sysProcAttr puts a child in its own process group, so that it and anything
// it starts can be signalled together, and kills it if the thread that started
// it goes away, which includes the test binary being killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
