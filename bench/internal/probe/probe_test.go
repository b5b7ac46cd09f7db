package probe

import (
	"testing"
	"time"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder(3)
	// First reconciles count for no round: the objects were written before.
	r.Observe(0, 4)
	r.Observe(1, 4)
	r.Observe(2, 0)
	if got := r.first.Load(); got != 3 {
		t.Fatalf("first: got %d, want 3", got)
	}
	if got := r.reached[4].Load(); got != 0 {
		t.Errorf("round 4 after first reconciles only: got %d, want 0", got)
	}
	r.Observe(0, 5)
	r.Observe(2, 5) // from round 0: counts rounds 1 to 5
	r.Observe(0, 5) // again: nothing
	r.Observe(7, 5) // out of range: only a reconcile
	if got := r.reached[5].Load(); got != 2 {
		t.Errorf("round 5: got %d, want 2", got)
	}
	if err := r.waitFor(&r.reached[5], 2, time.Second); err != nil {
		t.Error(err)
	}
	if err := r.waitFor(&r.reached[5], 3, 10*time.Millisecond); err == nil {
		t.Error("waiting for 3 objects at round 5: got no error, want a timeout")
	}
	if got := r.reconciles.Load(); got != 7 {
		t.Errorf("reconciles: got %d, want 7", got)
	}
}

func TestMeasure(t *testing.T) {
	m := Measure()
	if m.HeapInuse == 0 || m.RSS <= 0 || m.MaxRSS < m.RSS || m.Goroutines == 0 {
		t.Errorf("got %+v, want a heap, RSS <= peak RSS, goroutines", m)
	}
}
