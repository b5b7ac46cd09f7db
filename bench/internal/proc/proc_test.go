package proc

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type value struct {
	N int `json:"n"`
}

// TestLastValueBeforeExit: a binary that writes its last value and exits
// at once never loses it (Wait closes the output pipe, so reading comes
// first), and a wait past its end says that it exited.
func TestLastValueBeforeExit(t *testing.T) {
	for i := range 50 {
		p, err := Start[value]("sh", []string{"-c", `echo '{"n":1}'; echo '{"n":2}'`}, nil, filepath.Join(t.TempDir(), "log"))
		if err != nil {
			t.Fatal(err)
		}
		for want := 1; want <= 2; want++ {
			v, err := p.Next("a value", time.Minute)
			if err != nil || v.N != want {
				t.Fatalf("run %d: got %+v, %v, want n=%d", i, v, err, want)
			}
		}
		if _, err := p.Next("a third", time.Minute); err == nil || !strings.Contains(err.Error(), "exited (<nil>) while waiting for a third") {
			t.Fatalf("run %d: got %v, want that it exited", i, err)
		}
		if err := p.Wait(time.Minute); err != nil {
			t.Fatalf("run %d: Wait: %v", i, err)
		}
	}
}

// TestUnreadableOutput: output that is no JSON value is the error.
func TestUnreadableOutput(t *testing.T) {
	p, err := Start[value]("sh", []string{"-c", `echo 'not json'`}, nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next("a value", time.Minute); err == nil || !strings.Contains(err.Error(), "reading its output while waiting for a value") {
		t.Fatalf("got %v, want the reading's error", err)
	}
	p.Kill()
}
