package main

import (
	"testing"

	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

func TestMeasureJoinsWritesWithSightings(t *testing.T) {
	const ms = int64(1e6)
	writes := []write{
		{obj: 0, seq: 1, sent: 0, returned: 2 * ms},
		{obj: 1, seq: 2, sent: 10 * ms, returned: 12 * ms},
		{obj: 0, seq: 3, sent: 20 * ms, returned: 22 * ms},
		{obj: 1, seq: 4, sent: 30 * ms, returned: 32 * ms},
	}
	rep := shapes.Report{
		Sightings: [][]shapes.Sighting{
			{{Seq: 1, At: 1 * ms}, {Seq: 3, At: 25 * ms}}, // seen before the first patch returned
			{{Seq: 4, At: 40 * ms}},                       // write 2 seen only through write 4
		},
		FastCaughtUp: 40 * ms,
		SlowCaughtUp: 1032 * ms,
	}
	rr, err := measure(runResult{}, writes, rep)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{-1, 28, 3, 8}
	for i, w := range want {
		if rr.lags[i] != w {
			t.Errorf("lag of write %d = %v ms, want %v", i, rr.lags[i], w)
		}
	}
	if rr.skipped != 1 {
		t.Errorf("skipped = %d, want 1", rr.skipped)
	}
	if rr.p50 != 3 || rr.p99 != 28 || rr.max != 28 {
		t.Errorf("p50, p99, max = %v, %v, %v; want 3, 28, 28", rr.p50, rr.p99, rr.max)
	}
	if rr.slowCaughtUp != 1 || rr.fastCaughtUp != 0.008 {
		t.Errorf("caught up: fast %v s, slow %v s; want 0.008, 1", rr.fastCaughtUp, rr.slowCaughtUp)
	}

	rep.Sightings[1] = rep.Sightings[1][:0]
	if _, err := measure(runResult{}, writes, rep); err == nil {
		t.Error("measure with a write fast never saw: no error")
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"-r", "2", "-note=main's baseline", "-variants", "wait30ms,none", ""})
	want := `-r 2 '-note=main'\''s baseline' -variants wait30ms,none ''`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}
