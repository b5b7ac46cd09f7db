package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

// tracker follows the namespace's ConfigMaps through one watch on the API
// server and records, for every state a source passes through, when its
// mirror first showed that state or a later one. Times are when the driver
// received the events: a source change and the mirror write that follows it
// are timed on the same stream by the same clock, so the difference is the
// controller's lag give or take the driver's own scheduling, a few
// milliseconds.
type tracker struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	sources map[string]*history // by source name
	mirrors map[string]bool     // by source name: whether its mirror exists
	// newest is when the newest source state that an event of a mirror
	// has shown was seen.
	newest time.Time
	err    error // why the watch ended early
}

// history is what one source went through, in the order of the server.
type history struct {
	states   []srcState
	byValue  map[string]int // data value -> index in states; values are unique per source
	mirrored int            // states[:mirrored] are mirrored
}

// srcState is one state of a source: its data value, or deleted.
type srcState struct {
	at       time.Time // when the driver saw it
	value    string
	deleted  bool
	mirrored time.Time // when the mirror first showed this state or a later one; zero if not yet
	// shown is when an event of the mirror showed exactly this state: zero
	// if none did, because the controller skipped the state, or because
	// the state is a deletion and the mirror was gone already.
	shown time.Time
}

// dataValue is what identifies a source's state: the writers put a value
// never written before into data "v".
func dataValue(cm *corev1.ConfigMap) string { return cm.Data["v"] }

// startTracker lists the namespace, takes what it holds as the current
// states (seen at the time of the list), and follows it from there.
func startTracker(ctx context.Context, cs kubernetes.Interface, ns string) (*tracker, error) {
	cms := cs.CoreV1().ConfigMaps(ns)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	t := &tracker{sources: map[string]*history{}, mirrors: map[string]bool{}, done: make(chan struct{})}
	at := time.Now()
	// Sources first: the list is sorted by name, and the mirrors (dst-...)
	// come before the sources they match.
	for _, mirrors := range []bool{false, true} {
		for i := range list.Items {
			if _, ok := mirrorOf(&list.Items[i]); ok == mirrors {
				t.observe(watch.Added, &list.Items[i], at)
			}
		}
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return cms.Watch(ctx, opts)
	}}
	ctx, t.cancel = context.WithCancel(ctx)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		t.cancel()
		return nil, err
	}
	go func() {
		defer close(t.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.fail(fmt.Errorf("the watch ended"))
					return
				}
				if ev.Type == watch.Error {
					t.fail(fmt.Errorf("the watch failed: %v", ev.Object))
					return
				}
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
					t.observe(ev.Type, cm, time.Now())
				}
			}
		}
	}()
	return t, nil
}

func (t *tracker) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
}

// mirrorOf returns the name of the source that cm mirrors, if cm is a
// mirror.
func mirrorOf(cm *corev1.ConfigMap) (string, bool) {
	return strings.CutPrefix(cm.Name, mirror.Name(""))
}

// observe records the new state of a source or a mirror, seen at time at.
func (t *tracker) observe(typ watch.EventType, cm *corev1.ConfigMap, at time.Time) {
	if typ != watch.Added && typ != watch.Modified && typ != watch.Deleted {
		return // bookmarks
	}
	deleted := typ == watch.Deleted
	t.mu.Lock()
	defer t.mu.Unlock()
	name, isMirror := mirrorOf(cm)
	switch {
	case !isMirror && cm.Labels[mirror.SourceLabel] == mirror.SourceValue:
		h := t.sources[cm.Name]
		if h == nil {
			h = &history{byValue: map[string]int{}}
			t.sources[cm.Name] = h
		}
		s := srcState{at: at, deleted: deleted}
		if !deleted {
			s.value = dataValue(cm)
			h.byValue[s.value] = len(h.states)
		}
		h.states = append(h.states, s)
		if deleted && !t.mirrors[cm.Name] {
			// The mirror is gone already: the controller's deletion of
			// it will find nothing and make no event.
			t.mirrored(h, len(h.states)-1, at, false)
		}
	case isMirror:
		t.mirrors[name] = !deleted
		h := t.sources[name]
		if h == nil {
			return
		}
		match := -1
		if deleted {
			for i := len(h.states) - 1; i >= h.mirrored; i-- {
				if h.states[i].deleted {
					match = i
					break
				}
			}
		} else if i, ok := h.byValue[dataValue(cm)]; ok {
			match = i
		}
		t.mirrored(h, match, at, true)
	}
}

// mirrored records that the mirror of h matched the state of index i at
// time at, through an event of the mirror if shown: that state, and every
// earlier one, is mirrored.
func (t *tracker) mirrored(h *history, i int, at time.Time, shown bool) {
	if i < h.mirrored {
		return
	}
	for ; h.mirrored <= i; h.mirrored++ {
		h.states[h.mirrored].mirrored = at
	}
	if shown {
		h.states[i].shown = at
		t.newest = later(t.newest, h.states[i].at)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// caughtUpSince reports whether, at now, a mirror has shown a source state
// seen after tm, and no source state seen late or longer before now waits
// for its mirror: caughtUp's condition, as of now.
func (t *tracker) caughtUpSince(tm, now time.Time, late time.Duration) bool {
	t.mu.Lock()
	newest := t.newest
	t.mu.Unlock()
	return newest.After(tm) && t.overdue(now, late) == 0
}

// overdue returns how many sources have a state seen at least late before
// now that is not mirrored yet.
func (t *tracker) overdue(now time.Time, late time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.sources {
		if h.mirrored < len(h.states) && now.Sub(h.states[h.mirrored].at) >= late {
			n++
		}
	}
	return n
}

// pending returns how many sources' current state is not mirrored yet.
func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.sources {
		if h.mirrored < len(h.states) {
			n++
		}
	}
	return n
}

// stop ends the watch and returns what the tracker recorded, by source
// name, and an error if the watch ended before.
func (t *tracker) stop() (map[string]*history, error) {
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sources, t.err
}

// allStates returns every source's states, in no particular order.
func allStates(sources map[string]*history) []srcState {
	var all []srcState
	for _, h := range sources {
		all = append(all, h.states...)
	}
	return all
}

// caughtUp returns when the controller had caught up after a disruption at
// from: the first time, once a mirror has shown a source state seen after
// from, when no source state seen late or longer before waits for its
// mirror. False if that never happened: some state was never mirrored, or
// none seen after from was. A state is overdue from late after it was seen
// until it is mirrored.
func caughtUp(states []srcState, from time.Time, late time.Duration) (time.Time, bool) {
	cur, ok := firstShownAfter(states, from)
	if !ok {
		return time.Time{}, false
	}
	type span struct{ start, end time.Time } // end zero: never mirrored
	var spans []span
	for _, s := range states {
		if !s.mirrored.IsZero() && s.mirrored.Sub(s.at) < late {
			continue
		}
		spans = append(spans, span{s.at.Add(late), s.mirrored})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for _, sp := range spans {
		if sp.start.After(cur) {
			break
		}
		if sp.end.IsZero() {
			return time.Time{}, false
		}
		if sp.end.After(cur) {
			cur = sp.end
		}
	}
	return cur, true
}

// firstShownAfter returns when an event of a mirror first showed a source
// state seen after t: when the controller was seeing and writing again.
// False if none did.
func firstShownAfter(states []srcState, t time.Time) (time.Time, bool) {
	var first time.Time
	for _, s := range states {
		if s.at.After(t) && !s.shown.IsZero() && (first.IsZero() || s.shown.Before(first)) {
			first = s.shown
		}
	}
	return first, !first.IsZero()
}

// maxLag returns the longest a state seen in [from, to) waited for its
// mirror, among the states mirrored before to.
func maxLag(states []srcState, from, to time.Time) time.Duration {
	var lag time.Duration
	for _, s := range states {
		if !s.at.Before(from) && s.at.Before(to) && !s.mirrored.IsZero() && s.mirrored.Before(to) {
			lag = max(lag, s.mirrored.Sub(s.at))
		}
	}
	return lag
}
