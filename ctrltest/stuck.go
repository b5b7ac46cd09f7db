package ctrltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stuck tells when a run's outcome is known before Exploration.Settle
// ends: a key whose reconciles fail again and again with the same error
// while nothing changes (no watch event reaches a manager, no write
// succeeds) fails the same way on every retry, so the run cannot settle.
// A controller may still be waiting on a timer of its own (RequeueAfter)
// that would change something: a key counts as stuck only once nothing has
// changed for longer than the reference runs ever went without a change.
type stuck struct {
	mu      sync.Mutex
	changes int           // events delivered and writes that succeeded, so far
	last    time.Time     // of the last change
	longest time.Duration // the longest time between two changes
	floor   time.Duration // how long nothing must change; 0: never stuck
	keys    map[string]streak
	found   string // why the run is stuck, while nothing changed since
}

// A streak is a key's failures with one error and no change between.
type streak struct {
	err     string
	changes int       // stuck.changes at its first failure
	since   time.Time // its first failure
	n       int
}

// minQuiet is the shortest floor: the backoff of a few retries.
const minQuiet = time.Second

func newStuck(floor time.Duration) *stuck {
	return &stuck{floor: floor, last: time.Now(), keys: map[string]streak{}}
}

// quietFloor is how long nothing must change for a failing key to count
// as stuck, from the reference runs' longest wait between two changes, or
// 0 if that is not shorter than settle.
func quietFloor(refLongest, settle time.Duration) time.Duration {
	f := max(minQuiet, 2*refLongest)
	if f >= settle {
		return 0
	}
	return f
}

// changed counts a change the managers may act on.
func (s *stuck) changed() {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes++
	s.longest = max(s.longest, now.Sub(s.last))
	s.last = now
	s.found = ""
}

// failed records a failed reconcile of key (controller, cluster,
// namespace and name) with err.
func (s *stuck) failed(key, err string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.keys[key]
	if st.err != err || st.changes != s.changes {
		st = streak{err: err, changes: s.changes, since: now}
	}
	st.n++
	s.keys[key] = st
	if quiet := now.Sub(s.last); s.floor > 0 && s.found == "" && st.n >= 3 && quiet >= s.floor {
		s.found = fmt.Sprintf("%s failed %d times in a row with the same error while nothing changed for %s "+
			"(no watch event reached the managers, no write succeeded): its retries cannot succeed: %s",
			key, st.n, quiet.Round(time.Millisecond), err)
	}
}

// verdict returns why the run is stuck, or "".
func (s *stuck) verdict() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.found
}

// longestQuiet returns the longest time between two changes so far.
func (s *stuck) longestQuiet() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longest
}

// errStuck is the cause of a settling ended because the run is stuck.
type errStuck struct{ why string }

func (e *errStuck) Error() string { return "the run cannot settle: " + e.why }

// watch returns ctx, canceled with an *errStuck once the run is stuck.
func (s *stuck) watch(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if why := s.verdict(); why != "" {
					cancel(&errStuck{why})
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(errors.New("settled")) }
}
