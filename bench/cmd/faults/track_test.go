package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

func newTestTracker() *tracker {
	return &tracker{sources: map[string]*history{}, mirrors: map[string]bool{}}
}

func srcCM(v string) *corev1.ConfigMap {
	return source("ns", 1, v)
}

func dstCM(v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: mirror.Name(sourceName(1))}, Data: map[string]string{"v": v}}
}

func TestTracker(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := newTestTracker()
	tr.observe(watch.Added, srcCM("1"), at(0))
	tr.observe(watch.Added, dstCM("1"), at(10))
	tr.observe(watch.Modified, srcCM("2"), at(20))
	tr.observe(watch.Modified, srcCM("3"), at(30))
	if got := tr.pending(); got != 1 {
		t.Errorf("got %d sources pending, want 1", got)
	}
	tr.observe(watch.Modified, dstCM("3"), at(40)) // skips 2: it counts as mirrored too
	tr.observe(watch.Modified, dstCM("old"), at(45))
	tr.observe(watch.Deleted, srcCM("3"), at(50))
	tr.observe(watch.Deleted, dstCM("3"), at(60))
	// Created and deleted again before the controller saw it: the mirror
	// is already gone, and nothing will tell.
	tr.observe(watch.Added, srcCM("4"), at(70))
	tr.observe(watch.Deleted, srcCM("4"), at(80))
	tr.observe(watch.Added, srcCM("5"), at(90))

	h := tr.sources[sourceName(1)]
	want := []struct{ seen, mirrored, shown int }{{0, 10, 10}, {20, 40, -1}, {30, 40, 40}, {50, 60, 60}, {70, 80, -1}, {80, 80, -1}, {90, -1, -1}}
	if len(h.states) != len(want) {
		t.Fatalf("got %d states, want %d", len(h.states), len(want))
	}
	for i, w := range want {
		s := h.states[i]
		opt := func(ms int) time.Time {
			if ms < 0 {
				return time.Time{}
			}
			return at(ms)
		}
		if !s.at.Equal(at(w.seen)) || !s.mirrored.Equal(opt(w.mirrored)) || !s.shown.Equal(opt(w.shown)) {
			t.Errorf("state %d: got seen %v, mirrored %v, shown %v; want %dms, %dms, %dms (-1: never)",
				i, s.at.Sub(t0), s.mirrored.Sub(t0), s.shown.Sub(t0), w.seen, w.mirrored, w.shown)
		}
	}
	if got := tr.overdue(at(90+999), time.Second); got != 0 {
		t.Errorf("got %d overdue before a second, want 0", got)
	}
	if got := tr.overdue(at(90+1000), time.Second); got != 1 {
		t.Errorf("got %d overdue after a second, want 1", got)
	}
	if !tr.newest.Equal(at(50)) {
		t.Errorf("got the newest state a mirror showed seen at %v, want 50ms", tr.newest.Sub(t0))
	}
}

func TestCaughtUp(t *testing.T) {
	hole := time.Now()
	at := func(s float64) time.Time { return hole.Add(time.Duration(s * float64(time.Second))) }
	// steady: a change every 100 ms from 1 s before the blackhole to 30 s
	// after it, each mirrored 10 ms later.
	steady := func() []srcState {
		var states []srcState
		for i := -10; i < 300; i++ {
			s := float64(i) / 10
			states = append(states, srcState{at: at(s), mirrored: at(s + 0.01), shown: at(s + 0.01)})
		}
		return states
	}
	// blind: changes seen from 10 ms before the blackhole to 5 s after it
	// are mirrored at 5 s.
	blind := func(states []srcState) []srcState {
		for i := range states {
			if s := &states[i]; s.at.After(at(-0.01)) && s.at.Before(at(5)) {
				s.mirrored, s.shown = at(5), time.Time{}
				if !s.at.Before(at(4.9)) {
					s.shown = at(5) // the mirror skipped to the last
				}
			}
		}
		return states
	}
	tests := []struct {
		name   string
		states []srcState
		want   float64 // seconds after the blackhole; -1: not caught up
	}{
		// The first change after the blackhole is seen at 0.1 s.
		{name: "kept up", states: steady(), want: 0.11},
		{name: "blind for 5 s", states: blind(steady()), want: 5},
		{name: "a backlog after", states: func() []srcState {
			st := blind(steady())
			st = append(st, srcState{at: at(1), mirrored: at(8), shown: at(8)})
			return st
		}(), want: 8},
		{name: "a late change long after does not count", states: func() []srcState {
			st := blind(steady())
			st = append(st, srcState{at: at(20), mirrored: at(22), shown: at(22)})
			return st
		}(), want: 5},
		{name: "a change never mirrored", states: func() []srcState {
			st := blind(steady())
			st = append(st, srcState{at: at(2)})
			return st
		}(), want: -1},
		{name: "nothing shown after", states: []srcState{{at: at(-1), mirrored: at(-0.9), shown: at(-0.9)}, {at: at(1), mirrored: at(1)}}, want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := caughtUp(tt.states, hole, time.Second)
			switch {
			case tt.want < 0 && ok:
				t.Errorf("got caught up at %v, want not caught up", got.Sub(hole))
			case tt.want >= 0 && !ok:
				t.Errorf("got not caught up, want %gs", tt.want)
			case tt.want >= 0 && got.Sub(hole).Round(time.Millisecond) != at(tt.want).Sub(hole).Round(time.Millisecond):
				t.Errorf("got caught up at %v, want %gs", got.Sub(hole), tt.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	r := stopResult{}
	for i := 1; i <= 100; i++ {
		r.perObject = append(r.perObject, float64(i))
	}
	for _, tt := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := r.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%g) = %g, want %g", tt.q, got, tt.want)
		}
	}
}
