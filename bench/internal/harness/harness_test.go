package harness

import (
	"os"
	"testing"
)

func TestSysmonThread(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc:", err)
	}
	tid := sysmonThread()
	if tid == 0 || tid == os.Getpid() {
		t.Fatalf("got thread %d, want another thread of this process", tid)
	}
	if s := threadSeconds(tid); s < 0 {
		t.Errorf("got %v CPU seconds for thread %d, want >= 0", s, tid)
	}
	if s := threadSeconds(0); s != -1 {
		t.Errorf("got %v for no thread, want -1", s)
	}
}
