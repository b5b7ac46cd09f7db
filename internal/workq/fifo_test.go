package workq

import (
	"slices"
	"testing"
)

func TestFIFO(t *testing.T) {
	var f fifo[int]
	var want []int // the model: a plain slice
	next := 0
	check := func(step string) {
		t.Helper()
		if f.Len() != len(want) {
			t.Fatalf("%s: Len %d, want %d", step, f.Len(), len(want))
		}
	}
	// Pushes and pops interleaved in runs of every length wrap the ring
	// around and grow it while it is wrapped.
	for run := 1; run < 70; run++ {
		for range run {
			f.Push(next)
			want = append(want, next)
			next++
		}
		check("push")
		for range run / 2 {
			if got := f.Pop(); got != want[0] {
				t.Fatalf("popped %d, want %d", got, want[0])
			}
			want = want[1:]
		}
		check("pop")
	}
	for len(want) > 0 {
		if got := f.Pop(); got != want[0] {
			t.Fatalf("popped %d, want %d", got, want[0])
		}
		want = want[1:]
	}
	check("drained")
	if f.buf != nil {
		t.Errorf("an empty fifo kept an array of %d", len(f.buf))
	}

	// Keys come one at a time: no allocation once the array exists.
	f.Push(1)
	f.Pop()
	if n := testing.AllocsPerRun(100, func() { f.Push(1); f.Pop() }); n != 0 {
		t.Errorf("a push and a pop allocate %v times", n)
	}
	// A popped key is not held by the array.
	f.Push(7)
	f.Push(8)
	f.Pop()
	if !slices.Contains(f.buf, 8) || slices.Contains(f.buf, 7) {
		t.Errorf("array %v after popping 7 of [7 8]", f.buf)
	}
}
