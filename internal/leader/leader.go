// Package leader elects one leader among replicas with a
// coordination.k8s.io/v1 Lease, with the algorithm and the Lease fields of
// client-go's leaderelection package. ctrl does not use that package because
// it imports every typed client and so links every API group into programs.
//
// A candidate takes the Lease when it is free or its holder has not renewed
// it for LeaseDuration, as an [Observer] judges it from the Lease it has
// just read (a quorum read). Writes carry the resourceVersion read, so two
// candidates never both succeed. The holder renews every RetryPeriod and holds a [Term]: it may act
// until RenewDeadline after the start of its last successful renewal, a
// deadline on its own monotonic clock that is shorter than LeaseDuration, so
// it stops before anyone else may start, even if it was paused and has not
// run since. A renewal that finds another holder ends the term at once.
package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	"github.com/typedctrl/ctrl/internal/binding"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Leases reads and writes Leases in one namespace.
type Leases interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Delete deletes the Lease if its resourceVersion is still rv.
	Delete(ctx context.Context, name, rv string) error
}

// Config describes one candidate.
type Config struct {
	Name, Namespace, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Leases                                    Leases
	// Log receives the election's lines; it should carry the Lease's name
	// and the identity, which the lines do not repeat.
	Log logr.Logger
	// Labels are set on the Lease when the candidate creates it.
	Labels map[string]string
	// Annotations, if set, returns annotations to set on the Lease with
	// each write that acquires or renews it: what the holder publishes
	// about itself, such as the shards it serves. It is called on the
	// elector's goroutine, just before the write.
	Annotations func() map[string]string
	// Wake, while the candidate holds the Lease, makes it renew at once
	// instead of at the end of the current RetryPeriod: to publish new
	// Annotations without waiting.
	Wake <-chan struct{}
	// Written, if set, is called with the Lease as the API server stored
	// it after each successful write that acquired or renewed it.
	Written func(*coordinationv1.Lease)
	// DeleteOnRelease makes the holder delete the Lease when it lets it
	// go, instead of leaving it free for the next candidate: for a Lease
	// named after its holder, which nobody else takes.
	DeleteOnRelease bool
	// Clock is the time source. Default: the real clock.
	Clock Clock
	// Observer judges whether another holder may still act. Default: one
	// of the elector's own.
	Observer *Observer
}

const jitter = 1.2 // as client-go's JitterFactor

// Run campaigns until this candidate holds the Lease, then calls lead on
// its own goroutine with the Term and a context that carries the term
// (WithTerm) and is canceled, with the term's error as its cause, when the
// term ends or ctx is done. It renews the Lease while lead runs, whether or
// not ctx is done, so that the term lasts while lead finishes its work:
// lead must return soon after its context is done.
//
// Once lead has returned, Run ends the term and releases the Lease, so
// that another candidate takes over at once. It returns nil if ctx is done,
// before or after the Lease was held; otherwise the error that ended the
// term, which wraps ErrLost: the Lease was not renewed before the term's
// deadline, or another candidate holds it.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context, t *Term)) error {
	e := &elector{cfg: cfg, clock: cfg.Clock, lease: cfg.Namespace + "/" + cfg.Name, obs: cfg.Observer}
	if e.clock == nil {
		e.clock = realClock{}
	}
	if e.obs == nil {
		e.obs = &Observer{Clock: e.clock}
	}
	t := e.acquire(ctx)
	if t == nil {
		return nil
	}
	cfg.Log.Info("became leader")
	leadCtx, stopLeading := context.WithCancelCause(WithTerm(ctx, t))
	defer stopLeading(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx, t)
	}()
	err := e.hold(ctx, t, done)
	if err != nil {
		stopLeading(err)
		cfg.Log.Error(err, "lost the lease")
	}
	<-done
	t.end(ErrReleased)
	e.release() // after a loss too: a renewal that came too late may have reached the server
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type elector struct {
	cfg   Config
	clock Clock
	lease string // namespace/name
	obs   *Observer
}

// sleep waits for d on the elector's clock, and reports whether d passed,
// or wake received, before stop or end was closed (a nil channel is never
// closed, and never receives).
func (e *elector) sleep(d time.Duration, stop, end <-chan struct{}, wake <-chan struct{}) bool {
	ch := make(chan struct{})
	defer e.clock.AfterFunc(d, func() { close(ch) })()
	select {
	case <-stop:
		return false
	case <-end:
		return false
	case <-ch:
		return true
	case <-wake:
		return true
	}
}

// acquire tries every RetryPeriod, with jitter, until it holds the Lease or
// ctx is done, and returns the term, or nil.
func (e *elector) acquire(ctx context.Context) *Term {
	for {
		start := e.clock.Now()
		if out, _ := e.tryAcquireOrRenew(ctx, false); out == held {
			return newTerm(e.lease, e.clock, start, e.cfg.RenewDeadline)
		}
		if !e.sleep(time.Duration(float64(e.cfg.RetryPeriod)*(1+rand.Float64()*(jitter-1))), ctx.Done(), nil, nil) {
			return nil
		}
	}
}

// hold renews the Lease every RetryPeriod until done is closed (nil) or
// the term ends (its error). Each successful renewal moves the term's
// deadline to RenewDeadline after the renewal began; a failed one is
// retried every RetryPeriod until the deadline, which ends the term.
func (e *elector) hold(ctx context.Context, t *Term, done <-chan struct{}) error {
	ctx = context.WithoutCancel(ctx) // renewals go on while lead finishes
	for {
		if !e.sleep(e.cfg.RetryPeriod, done, t.Done(), e.cfg.Wake) {
			return t.Err() // nil if lead returned
		}
		// The clock first: a holder that wakes past its deadline (it was
		// paused) has lost the Lease, whatever a request would answer.
		if err := t.Err(); err != nil {
			return err
		}
		start := e.clock.Now()
		rctx, cancel := e.until(ctx, t.Deadline())
		out, holder := e.tryAcquireOrRenew(rctx, true)
		cancel()
		switch out {
		case held:
			t.renew(start, e.cfg.RenewDeadline)
		case taken:
			t.end(fmt.Errorf("%w: lease %s is held by %q", ErrLost, e.lease, holder))
			return t.Err()
		}
	}
}

// until returns a context that is canceled at deadline on the elector's
// clock.
func (e *elector) until(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := e.clock.AfterFunc(deadline.Sub(e.clock.Now()), cancel)
	return ctx, func() { stop(); cancel() }
}

// outcome is what an attempt to acquire or renew the Lease found.
type outcome int

const (
	failed outcome = iota // the request failed: try again
	taken                 // another candidate holds the Lease
	held                  // this candidate holds it, as of its write
)

// tryAcquireOrRenew reads the Lease and writes it as held by this
// candidate, if it is free, expired, or already ours. When renewing, a
// Lease that names another holder, or none, is taken: someone else wrote
// it since our last renewal. It returns the holder it found.
func (e *elector) tryAcquireOrRenew(ctx context.Context, renewing bool) (outcome, string) {
	now := metav1.NewMicroTime(e.clock.Now())
	desired := coordinationv1.LeaseSpec{
		HolderIdentity:       &e.cfg.Identity,
		LeaseDurationSeconds: new(leaseSeconds(e.cfg.LeaseDuration)),
		AcquireTime:          &now,
		RenewTime:            &now,
		LeaseTransitions:     new(int32(0)),
	}
	cur, err := e.cfg.Leases.Get(ctx, e.cfg.Name)
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Labels: e.cfg.Labels}, Spec: desired}
		e.annotate(l)
		created, err := e.cfg.Leases.Create(ctx, l)
		if err != nil {
			e.cfg.Log.V(1).Info("cannot create the lease", "err", err.Error())
			return failed, ""
		}
		e.written(created)
		return held, e.cfg.Identity
	}
	if err != nil {
		e.cfg.Log.V(1).Info("cannot read the lease", "err", err.Error())
		return failed, ""
	}
	holder := ptrValue(cur.Spec.HolderIdentity)
	mine := holder == e.cfg.Identity
	switch {
	case renewing && !mine:
		return taken, holder
	case !mine && !e.obs.Expired(cur):
		return taken, holder // held, and renewed recently
	}
	transitions := ptrValue(cur.Spec.LeaseTransitions)
	if mine {
		desired.AcquireTime = cur.Spec.AcquireTime
	} else {
		transitions++
	}
	desired.LeaseTransitions = &transitions
	next := cur.DeepCopy()
	next.Spec = desired
	e.annotate(next)
	updated, err := e.cfg.Leases.Update(ctx, next)
	if err != nil {
		e.cfg.Log.V(1).Info("cannot update the lease", "err", err.Error())
		return failed, holder
	}
	e.written(updated)
	return held, e.cfg.Identity
}

// annotate sets the annotations the holder publishes on l.
func (e *elector) annotate(l *coordinationv1.Lease) {
	if e.cfg.Annotations == nil {
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for k, v := range e.cfg.Annotations() {
		l.Annotations[k] = v
	}
}

// written tells the observer and the holder what was written.
func (e *elector) written(l *coordinationv1.Lease) {
	e.obs.sighted(l, e.clock.Now())
	if e.cfg.Written != nil {
		e.cfg.Written(l)
	}
}

// release hands the Lease back: an empty holder and a one-second duration,
// as client-go does, so the next candidate takes it on its next try; or,
// with DeleteOnRelease, deletes it. It reads the Lease first: a renewal
// canceled by the shutdown may still have reached the server, leaving our
// last observed version stale.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	for attempt := 0; ; attempt++ {
		cur, err := e.cfg.Leases.Get(ctx, e.cfg.Name)
		if err != nil || ptrValue(cur.Spec.HolderIdentity) != e.cfg.Identity {
			return // gone, or not ours any more
		}
		if e.cfg.DeleteOnRelease {
			err = e.cfg.Leases.Delete(ctx, e.cfg.Name, cur.ResourceVersion)
			switch {
			case err == nil || apierrors.IsNotFound(err):
				e.cfg.Log.Info("deleted the lease")
				return
			case apierrors.IsConflict(err) && attempt < 3:
				continue
			}
			e.cfg.Log.Error(err, "cannot delete the lease; it expires after its duration")
			return
		}
		now := metav1.NewMicroTime(e.clock.Now())
		l := cur.DeepCopy()
		l.Spec.HolderIdentity = nil
		l.Spec.LeaseDurationSeconds = new(int32(1))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = e.cfg.Leases.Update(ctx, l)
		switch {
		case err == nil:
			e.cfg.Log.Info("released the lease")
			return
		case apierrors.IsConflict(err) && attempt < 3:
			continue
		default:
			e.cfg.Log.Error(err, "cannot release the lease; it expires after its duration")
			return
		}
	}
}

// leaseSeconds is the duration written into the Lease: rounded up, so that
// other candidates never wait less than the holder's term allows.
func leaseSeconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Default fills in the durations left zero from those set, in client-go's
// ratio of 15:10:2 (LeaseDuration, RenewDeadline, RetryPeriod), so that
// setting LeaseDuration alone scales the others; with none set, 15 s, 10 s
// and 2 s.
func (c *Config) Default() {
	var unit time.Duration // a fifteenth of the lease duration
	switch {
	case c.LeaseDuration > 0:
		unit = c.LeaseDuration / 15
	case c.RenewDeadline > 0:
		unit = c.RenewDeadline / 10
	case c.RetryPeriod > 0:
		unit = c.RetryPeriod / 2
	default:
		unit = time.Second
	}
	for _, d := range []struct {
		p *time.Duration
		n time.Duration
	}{{&c.LeaseDuration, 15}, {&c.RenewDeadline, 10}, {&c.RetryPeriod, 2}} {
		if *d.p == 0 {
			*d.p = d.n * unit
		}
	}
}

// Validate checks that the durations let a holder stop before another
// candidate may start.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || c.Identity == "":
		return errors.New("lease name and identity must be set")
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("LeaseDuration %s must be longer than RenewDeadline %s", c.LeaseDuration, c.RenewDeadline)
	case c.RenewDeadline <= time.Duration(jitter*float64(c.RetryPeriod)):
		return fmt.Errorf("RenewDeadline %s must be longer than %v times RetryPeriod %s", c.RenewDeadline, jitter, c.RetryPeriod)
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("LeaseDuration %s must be at least a second", c.LeaseDuration)
	}
	return nil
}

// Bound serves Leases in namespace ns through a binding.
func Bound(b *binding.Binding[*coordinationv1.Lease], ns string) Leases { return bound{b, ns} }

type bound struct {
	b  *binding.Binding[*coordinationv1.Lease]
	ns string
}

func (l bound) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return l.b.Get(ctx, l.ns, name, metav1.GetOptions{})
}

func (l bound) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	lease.Namespace = l.ns
	return l.b.Create(ctx, lease, metav1.CreateOptions{})
}

func (l bound) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return l.b.Update(ctx, lease, metav1.UpdateOptions{})
}

func (l bound) Delete(ctx context.Context, name, rv string) error {
	return l.b.Delete(ctx, l.ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
}
