package ctrl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/shard"
)

// entry is a reconcile running on this replica, at a point of the space.
type entry struct {
	point  uint64
	cancel context.CancelCauseFunc
}

// errMoved is the cause of a reconcile's context canceled because its
// object's part of the space is being given to another replica.
var errMoved = errors.New("ctrl: the object is moving to another replica")

// serve makes this replica serve exactly set: the sharded caches watch it,
// and the workers admit reconciles of its objects only. What it no longer
// serves is let go at once: running reconciles of those objects are
// canceled, and serve returns once they have all returned, or ctx is done.
func (s *sharding) serve(ctx context.Context, set shard.Set) error {
	names := s.labelNamespaces()
	s.mu.Lock()
	released, taken := s.serving.Minus(set), set.Minus(s.serving)
	s.serving = set
	s.setViewLocked(names)
	if !released.Empty() {
		s.handovers.WithLabelValues(s.ring, "released").Inc()
	}
	if !taken.Empty() {
		s.handovers.WithLabelValues(s.ring, "taken").Inc()
	}
	for e := range s.inflight {
		if released.Contains(e.point) {
			e.cancel(errMoved)
		}
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		running := 0
		for e := range s.inflight {
			if released.Contains(e.point) {
				running++
			}
		}
		s.mu.Unlock()
		if running == 0 {
			return nil
		}
		select {
		case <-s.left:
		case <-ctx.Done():
			return fmt.Errorf("ctrl: %d reconciles of objects moving to other replicas still run: %w", running, context.Cause(ctx))
		}
	}
}

// enter admits a reconcile of an object at point p if this replica serves
// p, and returns its context, canceled with errMoved if p is let go, and
// the function to call when it ends.
func (s *sharding) enter(ctx context.Context, p uint64) (context.Context, func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving.Contains(p) {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(ctx)
	e := &entry{point: p, cancel: cancel}
	s.inflight[e] = true
	return ctx, func() {
		s.mu.Lock()
		delete(s.inflight, e)
		s.mu.Unlock()
		cancel(nil)
		select {
		case s.left <- struct{}{}:
		default:
		}
	}, true
}

// The claim this replica publishes in its Lease: annotations and written
// are the elector's hooks, publish asks it to write and waits.

func (s *sharding) annotations() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	mode := s.modeNow()
	if s.byNamespace {
		mode += " by namespace"
	} else {
		mode += " by uid"
	}
	return map[string]string{shard.HeldAnnotation: s.held.String(),
		shard.GenerationAnnotation: strconv.FormatUint(s.gen, 10), shard.ModeAnnotation: mode}
}

func (s *sharding) written(l *coordinationv1.Lease) {
	gen, err := strconv.ParseUint(l.Annotations[shard.GenerationAnnotation], 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen > s.stored {
		s.stored = gen
		close(s.storedCh)
		s.storedCh = make(chan struct{})
	}
}

// publish makes this replica's Lease claim held, and returns once the API
// server stored it.
func (s *sharding) publish(ctx context.Context, held shard.Set) error {
	s.mu.Lock()
	s.held = held
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	for {
		s.mu.Lock()
		stored, ch := s.stored, s.storedCh
		s.mu.Unlock()
		if stored >= gen {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ctrl: publishing the claim of ring %s: %w", s.ring, context.Cause(ctx))
		}
	}
}

// shard runs the controllers while this replica holds its membership,
// with the ring's loop beside them.
func (m *Manager) shard(run, ctx context.Context, ctrls []managedController) error {
	b, err := bind[*coordinationv1.Lease](m, APIResource{})
	if err != nil {
		return err
	}
	s := m.sharding
	if !s.waitMode(run) {
		return nil
	}
	m.log.Info("joining the ring", "ring", s.ring, "identity", s.identity, "mode", s.mode, "by", strings.TrimPrefix(s.field, "object.metadata."))
	m.metrics.ShardMode.WithLabelValues(s.ring, s.mode).Set(1)
	member := s.member
	member.Leases = leases{b, s.namespace}
	var leadErr error
	err = leader.Run(run, member, func(memberCtx context.Context, t *leader.Term) {
		loopCtx, stop := context.WithCancel(memberCtx)
		var wg sync.WaitGroup
		wg.Go(func() { m.runRing(leader.WithTerm(loopCtx, t), b) })
		leadErr = m.lead(memberCtx, leader.WithTerm(ctx, t), ctrls)
		stop()
		wg.Wait()
	})
	if err != nil {
		return errors.Join(fmt.Errorf("ctrl: membership of ring %s: %w", s.ring, err), leadErr)
	}
	return leadErr
}

// runRing moves this replica towards its share of the ring while it is a
// member: on every change of the ring's Leases (or namespaces, or
// unlabeled objects), and every RetryPeriod, which is how members whose
// Leases expired are found.
func (m *Manager) runRing(ctx context.Context, b *binding.Binding[*coordinationv1.Lease]) {
	s := m.sharding
	log := m.log.WithValues("ring", s.ring)
	units := shard.BucketUnits
	if s.byNamespace {
		units = func() []shard.Span {
			var names []string
			for _, ns := range s.namespaces.List("", nil) {
				names = append(names, ns.Name)
			}
			return shard.PointUnits(names)
		}
	}
	r := &shard.Ring{Identity: s.identity, Lease: s.member.Name, Observer: s.obs, Log: log,
		Units:  units,
		Leases: func() []*coordinationv1.Lease { return s.leases.List(s.namespace, nil) },
		Fenced: func(ctx context.Context) ([]*coordinationv1.Lease, error) {
			l, err := b.List(ctx, s.namespace, metav1.ListOptions{LabelSelector: shard.RingLabel + "=" + s.ring})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		},
		Publish: s.publish,
		Serve:   s.serve,
	}
	tick := time.NewTicker(s.member.RetryPeriod)
	defer tick.Stop()
	share := m.metrics.ShardShare.WithLabelValues(s.ring)
	members := m.metrics.ShardMembers.WithLabelValues(s.ring)
	objects := m.metrics.ShardObjects.WithLabelValues(s.ring, s.identity)
	defer func() {
		share.Set(0)
		members.Set(0)
		m.metrics.ShardObjects.DeletePartialMatch(prometheus.Labels{"ring": s.ring})
	}()
	var last shard.Set
	for {
		began := s.pokes.Load() // the changes this round looks at
		if names := s.labelNamespaces(); names != nil {
			s.mu.Lock()
			s.setViewLocked(names) // namespaces may have come or gone
			s.mu.Unlock()
		}
		settled, live, err := r.Step(ctx)
		if err != nil && ctx.Err() == nil {
			log.V(1).Info("the ring's step failed; trying again", "err", err.Error())
		}
		if s.modeIs(shardModeLabels) {
			if err := m.startLabelers(); err != nil {
				m.fatal(err)
				return
			}
			if n := m.label(ctx); n > 0 {
				settled = false
			}
		}
		m.forgetExpired(ctx, b, r)
		s.mu.Lock()
		s.settled, s.members, s.looked = settled && err == nil, len(live), began
		s.share = shard.UnitsServed(r.Units(), r.Serving())
		s.mu.Unlock()
		if serving := r.Serving(); !serving.Equal(last) {
			log.Info("serving", "share", fmt.Sprintf("%.3f", serving.Fraction()), "members", live)
			last = serving
		}
		share.Set(s.share)
		members.Set(float64(len(live)))
		s.mu.Lock()
		counts := slices.Collect(maps.Values(s.primary))
		s.mu.Unlock()
		n := 0
		for _, count := range counts {
			n += count()
		}
		objects.Set(float64(n))
		m.activity.Add(1)
		// Wake when the next live member's Lease expires, not a retry
		// period later: a dead member's share moves that much sooner.
		next := s.member.RetryPeriod
		for _, l := range s.leases.List(s.namespace, nil) {
			if d := s.obs.Remaining(l); l.Name != s.member.Name && d > 0 {
				next = min(next, d+time.Millisecond)
			}
		}
		tick.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.kick:
		}
	}
}

// forgetExpired deletes the Leases of members gone for long: ten lease
// durations past their expiry. The delete is conditional on the version
// judged, so a member that came back keeps its Lease.
func (m *Manager) forgetExpired(ctx context.Context, b *binding.Binding[*coordinationv1.Lease], r *shard.Ring) {
	s := m.sharding
	all := s.leases.List(s.namespace, nil)
	s.obs.Forget(func(name string) bool {
		return slices.ContainsFunc(all, func(l *coordinationv1.Lease) bool { return l.Name == name })
	})
	for _, l := range all {
		if l.Name == s.member.Name || s.obs.ExpiredFor(l) < 10*s.member.LeaseDuration {
			continue
		}
		rv := l.ResourceVersion
		err := b.Delete(ctx, s.namespace, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil {
			m.log.Info("deleted the Lease of a member gone for long", "ring", s.ring, "lease", s.namespace+"/"+l.Name)
		}
	}
}

// admit decides whether this replica may reconcile key now: with
// sharding, only if it serves the object (as cached, or its tombstone); it
// returns the reconcile's context, canceled if the object moves away, and
// the function to call when the reconcile ends. A key of an object this
// replica does not hold at all passes: its reconcile does nothing.
func (c *Controller[T]) admit(ctx context.Context, key Key) (context.Context, func(), bool) {
	sc := c.cache.scope.shard
	if sc == nil {
		return ctx, func() {}, true
	}
	obj, ok := c.cache.Get(key)
	if !ok && c.tombstones != nil {
		c.mu.Lock()
		ts, had := c.tombstones[key]
		c.mu.Unlock()
		obj, ok = ts.obj, had
	}
	if !ok {
		return ctx, func() {}, true
	}
	p, ok := sc.s.point(obj, false)
	if ok {
		var leave func()
		if ctx, leave, ok = sc.s.enter(ctx, p); ok {
			return ctx, leave, true
		}
	}
	if c.tombstones != nil {
		c.mu.Lock()
		delete(c.tombstones, key)
		c.mu.Unlock()
	}
	return nil, nil, false
}

// poker is a handler that wakes the ring's loop on every change.
type poker[T Object] struct{ s *sharding }

func (p poker[T]) poke() {
	p.s.pokes.Add(1)
	select {
	case p.s.kick <- struct{}{}:
	default:
	}
}

func (p poker[T]) changed(event[T])  { p.poke() }
func (p poker[T]) listed([]event[T]) { p.poke() }
func (p poker[T]) joined(string)     {}
