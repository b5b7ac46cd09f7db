// Package leader elects one leader among replicas with a
// coordination.k8s.io/v1 Lease, with the algorithm and the Lease fields of
// client-go's leaderelection package. ctrl does not use that package because
// it imports every typed client and so links every API group into programs.
//
// A candidate takes the Lease when it is free or its holder has not renewed
// it for LeaseDuration, measured on the candidate's own clock from the last
// change it observed (so clock skew between replicas does not matter). The
// leader renews every RetryPeriod and gives up if it cannot renew within
// RenewDeadline, which is shorter than LeaseDuration, so it stops before
// anyone else may start. Writes carry the resourceVersion read, so two
// candidates never both succeed.
package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Leases reads and writes Leases in one namespace.
type Leases interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// Config describes one candidate.
type Config struct {
	Name, Namespace, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Leases                                    Leases
	Log                                       logr.Logger
	// OnStatus is called with true when the candidate becomes the leader and
	// with false when it stops leading.
	OnStatus func(leading bool)
	// Labels are set on the Lease when the candidate creates it.
	Labels map[string]string
}

// ErrLost is returned by Run when the leader could not renew its Lease.
var ErrLost = errors.New("leader election lost")

const jitter = 1.2 // as client-go's JitterFactor

// Run campaigns until this candidate holds the Lease, calls lead with a
// context that is canceled when leadership ends, and keeps renewing. When
// ctx is done it waits for lead to return, then releases the Lease so
// another candidate takes over at once, and returns nil. If renewing fails
// for RenewDeadline it cancels lead's context, waits for lead, and returns
// ErrLost. lead runs on its own goroutine.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context)) error {
	e := &elector{cfg: cfg}
	if !e.acquire(ctx) {
		return nil
	}
	cfg.Log.Info("became leader", "lease", cfg.Name, "identity", cfg.Identity)
	e.status(true)
	defer e.status(false)

	leadCtx, stopLeading := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	err := e.renew(ctx)
	stopLeading()
	<-done
	if err != nil {
		cfg.Log.Error(err, "lost the lease", "lease", cfg.Name)
		return err
	}
	e.release()
	return nil
}

type elector struct {
	cfg        Config
	observed   *coordinationv1.Lease // last Lease read or written
	observedAt time.Time             // when it last changed, on our clock
	leading    bool
}

func (e *elector) status(leading bool) {
	if e.cfg.OnStatus != nil && leading != e.leading {
		e.cfg.OnStatus(leading)
	}
	e.leading = leading
}

func (e *elector) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// acquire tries every RetryPeriod, with jitter, until it holds the Lease or
// ctx is done.
func (e *elector) acquire(ctx context.Context) bool {
	for {
		if e.tryAcquireOrRenew(ctx) {
			return true
		}
		if !e.wait(ctx, time.Duration(float64(e.cfg.RetryPeriod)*(1+rand.Float64()*(jitter-1)))) {
			return false
		}
	}
}

// renew renews every RetryPeriod until ctx is done (nil) or a renewal has
// not succeeded for RenewDeadline (ErrLost).
func (e *elector) renew(ctx context.Context) error {
	for {
		deadline, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		ok := false
		for !ok && deadline.Err() == nil {
			if ok = e.tryAcquireOrRenew(deadline); !ok {
				e.wait(deadline, e.cfg.RetryPeriod)
			}
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case !ok:
			return ErrLost
		}
		if !e.wait(ctx, e.cfg.RetryPeriod) {
			return nil
		}
	}
}

func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	now := metav1.NewMicroTime(time.Now())
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
		created, err := e.cfg.Leases.Create(ctx, l)
		if err != nil {
			e.cfg.Log.V(1).Info("cannot create the lease", "lease", e.cfg.Name, "err", err)
			return false
		}
		e.observe(created)
		return true
	}
	if err != nil {
		e.cfg.Log.V(1).Info("cannot read the lease", "lease", e.cfg.Name, "err", err)
		return false
	}
	if e.observed == nil || e.observed.ResourceVersion != cur.ResourceVersion {
		e.observe(cur)
	}
	holder := ptrValue(cur.Spec.HolderIdentity)
	mine := holder == e.cfg.Identity
	if holder != "" && !mine && time.Since(e.observedAt) < time.Duration(ptrValue(cur.Spec.LeaseDurationSeconds))*time.Second {
		return false // held, and renewed recently as far as we can tell
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
	updated, err := e.cfg.Leases.Update(ctx, next)
	if err != nil {
		e.cfg.Log.V(1).Info("cannot update the lease", "lease", e.cfg.Name, "err", err)
		return false
	}
	e.observe(updated)
	return true
}

func (e *elector) observe(l *coordinationv1.Lease) {
	e.observed = l
	e.observedAt = time.Now()
}

// release hands the Lease back: an empty holder and a one-second duration,
// as client-go does, so the next candidate takes it on its next try. It
// reads the Lease first: a renewal canceled by the shutdown may still have
// reached the server, leaving our last observed version stale.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	for attempt := 0; ; attempt++ {
		cur, err := e.cfg.Leases.Get(ctx, e.cfg.Name)
		if err != nil || ptrValue(cur.Spec.HolderIdentity) != e.cfg.Identity {
			return // gone, or not ours any more
		}
		now := metav1.NewMicroTime(time.Now())
		l := cur.DeepCopy()
		l.Spec.HolderIdentity = nil
		l.Spec.LeaseDurationSeconds = new(int32(1))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = e.cfg.Leases.Update(ctx, l)
		switch {
		case err == nil:
			e.cfg.Log.Info("released the lease", "lease", e.cfg.Name)
			return
		case apierrors.IsConflict(err) && attempt < 3:
			continue
		default:
			e.cfg.Log.Error(err, "cannot release the lease; it expires after its duration", "lease", e.cfg.Name)
			return
		}
	}
}

// leaseSeconds is the duration written into the Lease: rounded up, so that
// other candidates never wait less than the leader's RenewDeadline allows.
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

// Validate checks that the durations let a leader stop before another
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
