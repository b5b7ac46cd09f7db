package shapes

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseVariant(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want     Variant
		describe string
	}{
		{"none", Variant{Shape{"none", 0}, 1}, "none"},
		{"wait30ms", Variant{Shape{"wait", 30 * time.Millisecond}, 1}, "30 ms wait"},
		{"wait30ms-w4", Variant{Shape{"wait", 30 * time.Millisecond}, 4}, "30 ms wait, Workers: 4"},
		{"cpu10ms", Variant{Shape{"cpu", 10 * time.Millisecond}, 1}, "10 ms of CPU"},
		{"wait1.5s", Variant{Shape{"wait", 1500 * time.Millisecond}, 1}, "1500 ms wait"},
	} {
		got, err := ParseVariant(tc.in)
		if err != nil {
			t.Errorf("ParseVariant(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseVariant(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if back, err := ParseVariant(got.String()); err != nil || back != got {
			t.Errorf("ParseVariant(%q.String() = %q) = %+v, %v; want %+v", tc.in, got.String(), back, err, got)
		}
		if d := got.Describe(); d != tc.describe {
			t.Errorf("%q.Describe() = %q, want %q", tc.in, d, tc.describe)
		}
	}
	for _, bad := range []string{"", "sleep30ms", "wait", "wait-5ms", "cpu10ms-w0", "wait30ms-wx"} {
		if v, err := ParseVariant(bad); err == nil {
			t.Errorf("ParseVariant(%q) = %+v, want an error", bad, v)
		}
	}
}

func newTestHarness(n, rounds int, base int64) *Harness {
	h := &Harness{Flags: Flags{N: n, Rounds: rounds, Base: base, Variant: Variant{Shape{"none", 0}, 1}},
		sightings: make([][]Sighting, n), notify: make(chan struct{}, 1)}
	for _, tr := range []*track{&h.fast, &h.slow} {
		tr.seen = make([]atomic.Int64, n)
		for i := range tr.seen {
			tr.seen[i].Store(-1)
		}
	}
	return h
}

func seqOf(s int64) map[string]string {
	return map[string]string{SeqAnnotation: strconv.FormatInt(s, 10)}
}

func TestRecordCatchesUpOnLastWrites(t *testing.T) {
	const n, rounds, base = 2, 2, 10 // writes 11..14: 11, 13 to object 0; 12, 14 to object 1
	h := newTestHarness(n, rounds, base)
	for i := range n {
		h.Fast(ObjectName(i), seqOf(3)) // start-up: written by an earlier run
		h.Slow(ObjectName(i), seqOf(3))
	}
	if h.fast.first.Load() != n || h.slow.first.Load() != n {
		t.Fatalf("first: fast %d, slow %d, want %d", h.fast.first.Load(), h.slow.first.Load(), n)
	}
	h.Fast(ObjectName(0), seqOf(11))
	h.Fast(ObjectName(0), seqOf(11)) // again at the same write: no new sighting
	h.Fast(ObjectName(1), seqOf(14)) // 12 coalesced into 14
	h.Fast(ObjectName(0), seqOf(13))
	h.Slow(ObjectName(0), seqOf(13))
	if got := h.fast.done.Load(); got != n {
		t.Errorf("fast done %d, want %d", got, n)
	}
	if got := h.slow.done.Load(); got != 1 {
		t.Errorf("slow done %d, want 1", got)
	}
	want := [][]Sighting{{{11, 0}, {13, 0}}, {{14, 0}}}
	for i := range want {
		if len(h.sightings[i]) != len(want[i]) {
			t.Fatalf("sightings of object %d: %v, want seqs %v", i, h.sightings[i], want[i])
		}
		for j := range want[i] {
			if h.sightings[i][j].Seq != want[i][j].Seq || h.sightings[i][j].At == 0 {
				t.Errorf("sighting %d of object %d: %+v, want seq %d at a time", j, i, h.sightings[i][j], want[i][j].Seq)
			}
		}
	}
	if got := h.fast.reconciles.Load(); got != 6 {
		t.Errorf("fast reconciles %d, want 6", got)
	}
}

func TestSlowSpendsItsTimeOnWrittenObjects(t *testing.T) {
	h := newTestHarness(1, 1, 5)
	h.Flags.Variant = Variant{Shape{"wait", 20 * time.Millisecond}, 1}
	t0 := time.Now()
	h.Slow(ObjectName(0), seqOf(5)) // not written in this run
	if d := time.Since(t0); d >= 20*time.Millisecond {
		t.Errorf("reconcile of an object not written in the run took %s, want at once", d)
	}
	t0 = time.Now()
	h.Slow(ObjectName(0), seqOf(6))
	h.Slow(ObjectName(0), seqOf(6)) // again at the same write: spends it again
	if d := time.Since(t0); d < 40*time.Millisecond {
		t.Errorf("two reconciles of a written object took %s, want at least 40ms", d)
	}
}

func TestCalibrate(t *testing.T) {
	perMs, err := Calibrate()
	if err != nil {
		t.Fatal(err)
	}
	if perMs <= 0 {
		t.Fatalf("Calibrate() = %d, want positive", perMs)
	}
}
