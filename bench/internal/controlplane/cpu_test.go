package controlplane

import (
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A real line, its comm changed to hold a space and a parenthesis.
	line := "4242 (kube (api) server) S 4200 4242 4200 0 -1 4194560 123 0 0 0 1234 567 0 0 20 0 12 0 100 0 0\n"
	st, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := stat{comm: "kube (api) server", ppid: 4200, cpu: 18010 * time.Millisecond}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	if _, err := parseStat("4242 (short) S 1"); err == nil {
		t.Error("got no error for a short line")
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := readStat("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	if st.comm == "" || st.ppid <= 0 {
		t.Errorf("got %+v for this process", st)
	}
}
