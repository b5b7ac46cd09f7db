package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeClock is a clock that moves only when told. Set moves it without
// running the timers that came due, as a paused process finds them when it
// runs again; Fire runs them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	dead bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.dead
		t.dead = true
		return was
	}
}

// Set moves the clock by d and runs no timer.
func (c *fakeClock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// FireNext runs the earliest timer that is due, and reports whether there
// was one.
func (c *fakeClock) FireNext() bool {
	c.mu.Lock()
	slices.SortStableFunc(c.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.dead })
	if len(c.timers) == 0 || c.timers[0].at.After(c.now) {
		c.mu.Unlock()
		return false
	}
	t := c.timers[0]
	t.dead = true
	c.mu.Unlock()
	t.f()
	return true
}

// Step moves the clock by d, running every timer on the way at its time,
// and waits for the goroutines of the bubble to settle after each.
func (c *fakeClock) Step(d time.Duration) {
	end := c.Now().Add(d)
	for {
		synctest.Wait()
		c.mu.Lock()
		next := end
		for _, t := range c.timers {
			if !t.dead && t.at.Before(next) {
				next = t.at
			}
		}
		if next.After(c.now) {
			c.now = next
		}
		c.mu.Unlock()
		if !c.FireNext() {
			if c.Now().Equal(end) {
				synctest.Wait()
				return
			}
		}
	}
}

// fakeLeases is one Lease in memory. Every call is recorded with the
// clock's time; hooks may fail calls or change the Lease.
type fakeLeases struct {
	clock *fakeClock
	mu    sync.Mutex
	lease *coordinationv1.Lease
	rv    int
	calls []call
	fail  error // returned by every call while set
}

type call struct {
	op string
	at time.Time
}

func (f *fakeLeases) record(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{op, f.clock.Now()})
	return f.fail
}

func (f *fakeLeases) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	if err := f.record("get"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name)
	}
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := f.record("create"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease != nil {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "leases"}, l.Name)
	}
	f.storeLocked(l)
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := f.record("update"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, l.Name, errors.New("changed"))
	}
	f.storeLocked(l)
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Delete(ctx context.Context, name, rv string) error {
	if err := f.record("delete"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.lease == nil:
		return apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, name)
	case f.lease.ResourceVersion != rv:
		return apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, name, errors.New("changed"))
	}
	f.lease = nil
	return nil
}

func (f *fakeLeases) storeLocked(l *coordinationv1.Lease) {
	f.rv++
	f.lease = l.DeepCopy()
	f.lease.ResourceVersion = strconv.Itoa(f.rv)
}

// take makes another candidate the holder.
func (f *fakeLeases) take(holder string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lease.DeepCopy()
	l.Spec.HolderIdentity = &holder
	f.storeLocked(l)
}

func (f *fakeLeases) holder() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ptrValue(f.lease.Spec.HolderIdentity)
}

// callsSince returns the calls made at or after at.
func (f *fakeLeases) callsSince(at time.Time) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.calls), func(c call) bool { return c.at.Before(at) })
}

const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// candidate runs Run for identity "me" against leases, with a lead that
// records its term and waits for its context. It returns what Run returned
// on a channel, and the term once it leads.
type candidate struct {
	term   chan *Term
	ctx    chan context.Context
	result chan error
}

func runCandidate(ctx context.Context, clock *fakeClock, leases *fakeLeases, hold func(ctx context.Context)) *candidate {
	cfg := Config{Name: "l", Namespace: "ns", Identity: "me", Leases: leases, Clock: clock, Log: logr.Discard(),
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
	c := &candidate{term: make(chan *Term, 1), ctx: make(chan context.Context, 1), result: make(chan error, 1)}
	go func() {
		c.result <- Run(ctx, cfg, func(ctx context.Context, t *Term) {
			c.term <- t
			c.ctx <- ctx
			if hold != nil {
				hold(ctx)
			}
			<-ctx.Done()
		})
	}()
	return c
}

func TestTermDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		start := clock.Now()
		term := newTerm("ns/l", clock, start, renewDeadline)
		ctx := WithTerm(context.Background(), term)
		if err := Check(ctx); err != nil {
			t.Fatalf("a new term: got %v, want nil", err)
		}
		clock.Step(renewDeadline - time.Millisecond)
		term.renew(start.Add(5*time.Second), renewDeadline)
		if got, want := term.Deadline(), start.Add(15*time.Second); !got.Equal(want) {
			t.Errorf("after a renewal that began at +5s: got deadline %v, want %v", got.Sub(start), want.Sub(start))
		}
		term.renew(start.Add(time.Second), renewDeadline) // an older renewal's answer
		if got, want := term.Deadline(), start.Add(15*time.Second); !got.Equal(want) {
			t.Errorf("after an older renewal: got deadline %v, want %v", got.Sub(start), want.Sub(start))
		}
		clock.Step(5 * time.Second) // past the first deadline: the timer sets itself again
		if err := term.Err(); err != nil {
			t.Fatalf("before the renewed deadline: %v", err)
		}
		clock.Step(time.Millisecond)
		select {
		case <-term.Done():
		default:
			t.Fatal("Done is open after the deadline's timer fired")
		}
		if err := Check(ctx); !errors.Is(err, ErrLost) {
			t.Errorf("after the deadline: got %v, want ErrLost", err)
		}
		term.renew(clock.Now(), renewDeadline)
		if err := term.Err(); err == nil {
			t.Error("a renewal after the deadline revived the term")
		}
	})
}

// TestTermPause: a holder paused past its deadline finds its term ended
// the moment it runs, before the deadline's timer fires.
func TestTermPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		outer := newTerm("ns/outer", clock, clock.Now(), time.Hour)
		term := newTerm("ns/l", clock, clock.Now(), renewDeadline)
		ctx := WithTerm(WithTerm(context.Background(), outer), term)
		clock.Set(2 * leaseDuration) // no timer fires
		err := Check(ctx)
		if !errors.Is(err, ErrLost) {
			t.Fatalf("after a pause: got %v, want ErrLost", err)
		}
		t.Logf("error: %v", err)
		select {
		case <-term.Done():
		default:
			t.Error("Done is open after Check found the deadline passed")
		}
		if outer.Err() != nil {
			t.Error("the outer term ended too")
		}
	})
}

// TestRunPause: the holder is paused (the clock jumps by twice the lease
// duration, and no goroutine runs meanwhile) while another candidate takes
// the Lease. When it runs again, its renewal timer fires first, before the
// deadline's: it must make no request, end its term, cancel lead's
// context, and return ErrLost.
func TestRunPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		leases := &fakeLeases{clock: clock}
		c := runCandidate(context.Background(), clock, leases, nil)
		clock.Step(0)
		term, leadCtx := <-c.term, <-c.ctx
		clock.Step(3 * retryPeriod) // a few renewals
		if n := len(leases.callsSince(clock.Now().Add(-3 * retryPeriod))); n == 0 {
			t.Fatal("no renewal while leading")
		}

		paused := clock.Now()
		clock.Set(2 * leaseDuration)
		leases.take("other")
		resumed := clock.Now()
		if !clock.FireNext() { // the renewal loop's sleep, due long ago
			t.Fatal("no timer due after the pause")
		}
		synctest.Wait()

		if err := term.Err(); !errors.Is(err, ErrLost) {
			t.Errorf("term after the pause: got %v, want ErrLost", err)
		}
		if leadCtx.Err() == nil {
			t.Error("lead's context is not canceled after the pause")
		} else if cause := context.Cause(leadCtx); !errors.Is(cause, ErrLost) {
			t.Errorf("lead's context's cause: got %v, want ErrLost", cause)
		}
		select {
		case err := <-c.result:
			if !errors.Is(err, ErrLost) {
				t.Errorf("Run: got %v, want ErrLost", err)
			}
		default:
			t.Fatal("Run has not returned after the pause")
		}
		// The release that follows reads the Lease, finds another holder,
		// and writes nothing.
		for _, call := range leases.callsSince(resumed) {
			if call.op != "get" {
				t.Errorf("after the pause: a %s of the Lease", call.op)
			}
		}
		if n := len(leases.callsSince(resumed)); n > 1 {
			t.Errorf("after the pause: %d requests, want at most the release's read", n)
		}
		if leases.holder() != "other" {
			t.Errorf("holder: got %q, want other", leases.holder())
		}
		_ = paused
	})
}

// TestRunTakenEndsAtOnce: a renewal that reads another holder ends the
// term at that renewal, not after RenewDeadline of retries.
func TestRunTakenEndsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		leases := &fakeLeases{clock: clock}
		c := runCandidate(context.Background(), clock, leases, nil)
		clock.Step(0)
		term := <-c.term
		<-c.ctx
		leases.take("other")
		taken := clock.Now()
		clock.Step(retryPeriod) // the next renewal
		if err := term.Err(); !errors.Is(err, ErrLost) {
			t.Fatalf("after a renewal found another holder: got %v, want ErrLost", err)
		}
		select {
		case err := <-c.result:
			if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), `held by "other"`) {
				t.Errorf("Run: got %v, want ErrLost naming the holder", err)
			}
		default:
			t.Fatal("Run has not returned")
		}
		if d := clock.Now().Sub(taken); d != retryPeriod {
			t.Errorf("ended %s after the Lease was taken, want at the next renewal, %s", d, retryPeriod)
		}
	})
}

// TestRunRenewalsFail: while every request fails, the term ends at the
// deadline set by the last successful renewal's start, not later.
func TestRunRenewalsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		leases := &fakeLeases{clock: clock}
		c := runCandidate(context.Background(), clock, leases, nil)
		clock.Step(0)
		term := <-c.term
		<-c.ctx
		clock.Step(retryPeriod) // one renewal
		lastStart := clock.Now()
		if !term.Deadline().Equal(lastStart.Add(renewDeadline)) {
			t.Fatalf("deadline: got %v after the renewal, want %v", term.Deadline().Sub(lastStart), renewDeadline)
		}
		leases.mu.Lock()
		leases.fail = errors.New("unreachable")
		leases.mu.Unlock()
		clock.Step(renewDeadline - time.Millisecond)
		if err := term.Err(); err != nil {
			t.Fatalf("before the deadline: %v", err)
		}
		clock.Step(time.Millisecond)
		if err := term.Err(); !errors.Is(err, ErrLost) {
			t.Fatalf("at the deadline: got %v, want ErrLost", err)
		}
		if err := <-c.result; !errors.Is(err, ErrLost) {
			t.Errorf("Run: got %v, want ErrLost", err)
		}
	})
}

// TestRunShutdown: once ctx is done, the holder keeps renewing while lead
// finishes its work, then releases the Lease; Run returns nil.
func TestRunShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		leases := &fakeLeases{clock: clock}
		ctx, cancel := context.WithCancel(context.Background())
		finish := make(chan struct{})
		c := runCandidate(ctx, clock, leases, func(ctx context.Context) {
			<-ctx.Done()
			<-finish // lead's work outlasts the deadline
		})
		clock.Step(0)
		term := <-c.term
		<-c.ctx
		cancel()
		clock.Step(3 * leaseDuration)
		if err := term.Err(); err != nil {
			t.Fatalf("while lead finishes: %v", err)
		}
		close(finish)
		synctest.Wait()
		if err := <-c.result; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
		if !errors.Is(term.Err(), ErrLost) {
			t.Errorf("term after Run returned: got %v, want ended", term.Err())
		}
		if h := leases.holder(); h != "" {
			t.Errorf("holder after Run: got %q, want the Lease released", h)
		}
	})
}

func TestDefault(t *testing.T) {
	tests := []struct {
		in, want [3]time.Duration
	}{
		{[3]time.Duration{}, [3]time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second}},
		{[3]time.Duration{3 * time.Second}, [3]time.Duration{3 * time.Second, 2 * time.Second, 400 * time.Millisecond}},
		{[3]time.Duration{60 * time.Second}, [3]time.Duration{60 * time.Second, 40 * time.Second, 8 * time.Second}},
		{[3]time.Duration{0, 4 * time.Second}, [3]time.Duration{6 * time.Second, 4 * time.Second, 800 * time.Millisecond}},
		{[3]time.Duration{5 * time.Second, 4 * time.Second}, [3]time.Duration{5 * time.Second, 4 * time.Second, 666666666}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.in), func(t *testing.T) {
			c := Config{LeaseDuration: tt.in[0], RenewDeadline: tt.in[1], RetryPeriod: tt.in[2]}
			c.Default()
			if got := [3]time.Duration{c.LeaseDuration, c.RenewDeadline, c.RetryPeriod}; got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
