package leader

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// An Observer judges, from the Leases it is shown, whether their holders
// may still act: the one judgment that both an election and a sharded
// ring's membership rest on. The elector consults it before taking a
// Lease; a ring, before taking what another member held. It is safe for
// concurrent use; the zero value uses the real clock.
type Observer struct {
	Clock Clock // Default: the real clock.

	mu   sync.Mutex
	seen map[string]sighting // by Lease name: its version, when first seen
}

type sighting struct {
	rv string
	at time.Time
}

// Expired reports whether l is free or its holder may no longer act: it
// names no holder, or it was renewed more than its leaseDurationSeconds
// ago. When it was renewed is read from its renewTime, written by the
// holder's clock at the start of the renewal, so that an observer that
// has just started finds a Lease abandoned long ago expired at once,
// instead of one lease duration after it first saw it. That relies on the
// clocks of holder and observer agreeing to within LeaseDuration -
// RenewDeadline, the margin by which a holder stops before its Lease
// expires. A renewTime later than the observer's first sighting of the
// Lease's current version counts from that sighting instead, on the
// observer's own clock, so a holder whose clock runs ahead is not believed
// alive for longer than a lease duration.
//
// An expired Lease is only a belief until a quorum read confirms it:
// read the Lease with a plain Get (or List), which the API server serves
// from etcd with a quorum, and judge that copy; a holder that renewed
// meanwhile has a new resourceVersion and a new renewTime.
func (o *Observer) Expired(l *coordinationv1.Lease) bool { return o.Remaining(l) == 0 }

// Remaining returns how long until l expires, as Expired judges it: 0 if
// it has.
func (o *Observer) Remaining(l *coordinationv1.Lease) time.Duration {
	if ptrValue(l.Spec.HolderIdentity) == "" {
		return 0
	}
	now := o.now()
	since := o.sighted(l, now)
	if rt := l.Spec.RenewTime; rt != nil && rt.Time.Before(since) {
		since = rt.Time
	}
	d := time.Duration(ptrValue(l.Spec.LeaseDurationSeconds)) * time.Second
	return max(0, d-now.Sub(since))
}

// ExpiredFor returns how long ago l expired, or 0 if it has not: for
// removing the Leases of members long gone. A Lease without a holder
// counts from its renewTime.
func (o *Observer) ExpiredFor(l *coordinationv1.Lease) time.Duration {
	if ptrValue(l.Spec.HolderIdentity) != "" && !o.Expired(l) {
		return 0
	}
	rt := l.Spec.RenewTime
	if rt == nil {
		return 0
	}
	d := time.Duration(ptrValue(l.Spec.LeaseDurationSeconds)) * time.Second
	return max(0, o.now().Sub(rt.Time.Add(d)))
}

// Forget drops what the observer remembers of the Leases keep reports
// false for: Leases that were deleted.
func (o *Observer) Forget(keep func(name string) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.seen {
		if !keep(name) {
			delete(o.seen, name)
		}
	}
}

// sighted returns when the observer first saw l's current version.
func (o *Observer) sighted(l *coordinationv1.Lease, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]sighting{}
	}
	s, ok := o.seen[l.Name]
	if !ok || s.rv != l.ResourceVersion {
		s = sighting{l.ResourceVersion, now}
		o.seen[l.Name] = s
	}
	return s.at
}

func (o *Observer) now() time.Time {
	if o.Clock == nil {
		return time.Now()
	}
	return o.Clock.Now()
}
