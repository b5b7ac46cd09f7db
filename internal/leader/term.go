package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrLost is the error of work done for a term that has ended: the
// holder's deadline passed, or it found the Lease held by another.
var ErrLost = errors.New("leadership lost")

// ErrReleased ends a term whose holder gave the Lease up; it wraps ErrLost.
var ErrReleased = fmt.Errorf("%w: the lease was released", ErrLost)

// A Term is one stretch of holding a Lease, from its acquisition to its
// deadline: RenewDeadline after the start of the last successful renewal
// (or of the acquisition). Past the deadline the term is over, whatever a
// request to the API server would answer: Err reads the clock, so a
// holder that was paused (SIGSTOP, a long GC pause, a frozen VM) sees its
// term has ended the moment it runs again, before any timer of its own
// fires. A term also ends early, when a renewal finds another holder, or
// when the holder releases the Lease. It never begins again: a new
// acquisition is a new Term. A Term is safe for concurrent use.
//
// Why the deadline keeps two holders apart: another candidate takes the
// Lease only after it has seen no change to it for LeaseDuration on its own
// clock, and it can have seen the last renewal no earlier than that renewal
// began. So nobody else may hold the Lease before the renewal's start plus
// LeaseDuration, and the holder stops acting LeaseDuration - RenewDeadline
// before that. That margin is what a write checked just before the
// deadline has to reach the API server in, and it absorbs the difference in
// rate between two machines' clocks (parts per million).
type Term struct {
	lease string // namespace/name, for errors
	clock Clock

	mu       sync.Mutex
	deadline time.Time
	renewed  time.Time // start of the last successful renewal or acquisition
	err      error     // why the term ended; nil while it runs
	done     chan struct{}
	stop     func() bool // the timer that ends the term at its deadline
}

// newTerm begins a term whose acquisition started at start.
func newTerm(lease string, clock Clock, start time.Time, renewDeadline time.Duration) *Term {
	t := &Term{lease: lease, clock: clock, renewed: start, deadline: start.Add(renewDeadline), done: make(chan struct{})}
	t.mu.Lock()
	t.armLocked()
	t.mu.Unlock()
	return t
}

// armLocked sets the timer for the deadline. A timer that fires early,
// because a renewal moved the deadline since it was set, sets itself again;
// one that fires late, after a pause, finds Err has ended the term already,
// if anyone asked.
func (t *Term) armLocked() {
	t.stop = t.clock.AfterFunc(t.deadline.Sub(t.clock.Now()), func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.err == nil && !t.expiredLocked() {
			t.armLocked()
		}
	})
}

// expiredLocked ends the term if its deadline has passed, and reports
// whether it has ended.
func (t *Term) expiredLocked() bool {
	if t.err != nil {
		return true
	}
	now := t.clock.Now()
	if now.Before(t.deadline) {
		return false
	}
	t.endLocked(fmt.Errorf("%w: lease %s not renewed in time: its deadline passed %s ago (the last renewal began %s before it)",
		ErrLost, t.lease, now.Sub(t.deadline).Round(time.Millisecond), t.deadline.Sub(t.renewed).Round(time.Millisecond)))
	return true
}

func (t *Term) endLocked(err error) {
	t.err = err
	close(t.done)
	t.stop()
}

// Err returns nil while the term runs, and once it has ended an error
// wrapping ErrLost that says why. It reads the clock: a term whose
// deadline has passed has ended, even if its timer has not fired yet.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expiredLocked()
	return t.err
}

// Done returns a channel that is closed when the term ends: at its
// deadline (late, if the process was paused then: check Err before acting),
// when the Lease is found held by another, or when it is released.
func (t *Term) Done() <-chan struct{} { return t.done }

// Deadline returns when the term ends unless it is renewed.
func (t *Term) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// renew moves the deadline to renewDeadline after start, the moment the
// successful renewal began, unless the term has ended: a renewal that
// succeeded on the server after the holder's deadline does not revive it.
func (t *Term) renew(start time.Time, renewDeadline time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expiredLocked() || !start.After(t.renewed) {
		return
	}
	t.renewed, t.deadline = start, start.Add(renewDeadline)
}

// end ends the term with err, unless it has ended already.
func (t *Term) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.endLocked(err)
	}
}

// terms is the list of terms a context carries, innermost first.
type terms struct {
	t    *Term
	next *terms
}

type termsKey struct{}

// WithTerm returns a copy of ctx that carries t, beside the terms ctx
// carries already. Work done under the context may go on while every one
// of them runs; see Check.
func WithTerm(ctx context.Context, t *Term) context.Context {
	next, _ := ctx.Value(termsKey{}).(*terms)
	return context.WithValue(ctx, termsKey{}, &terms{t, next})
}

// Check returns nil if ctx carries no term, or only terms that run; else
// the error of the first that has ended, which wraps ErrLost. It is the
// check to make before a write done for the terms' holder.
func Check(ctx context.Context) error {
	ts, _ := ctx.Value(termsKey{}).(*terms)
	for ; ts != nil; ts = ts.next {
		if err := ts.t.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Holds reports whether ctx carries a term, ended or not: whether work
// done under it is to be checked.
func Holds(ctx context.Context) bool {
	_, ok := ctx.Value(termsKey{}).(*terms)
	return ok
}

// Clock tells the time and runs functions later: the real clock, or a
// fake one in tests. Its times must carry monotonic readings (time.Now's
// do), so that changes of the wall clock do not move a deadline.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d has passed, unless
	// stop is called first; stop reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Ended returns a term of lease that has ended with err, which wraps
// ErrLost: for tests of the code that checks terms.
func Ended(lease string, err error) *Term {
	t := newTerm(lease, realClock{}, time.Now(), time.Hour)
	t.end(err)
	return t
}

// Manual returns a term that runs until end is called: for tests of the
// checks made against terms.
func Manual(lease string) (t *Term, end func(error)) {
	t = newTerm(lease, realClock{}, time.Now(), time.Hour)
	return t, t.end
}
