package ctrl

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelop "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/shard"
)

// Sharding splits the objects of a program's controllers among its
// replicas, so that N replicas share the work and each caches about 1/N of
// the objects. Each replica holds a membership Lease; one of them, elected,
// is the sharder: it gives each object to a live replica by rendezvous
// hashing of its key, in a label (shard.ctrl.dev/<Name>: <identity>) that
// each replica's caches select on. Kubernetes itself is the engine: Leases,
// labels and label-selected watches, no other store.
//
// Guarantees:
//   - One owner: no two replicas reconcile an object at once. An object
//     moves between live replicas only after its old owner has let it go,
//     in the object's own worker, once any reconcile of it has ended.
//   - No orphans: the objects of a replica that stopped cleanly move at
//     once; those of one that died, within LeaseDuration and a few seconds.
//   - No stop-the-world: a replica that joins takes its share as the
//     others hand it over, object by object.
//
// The sharder keeps the name, resourceVersion and labels of every object
// of the sharded types (under a kilobyte each); a replica keeps the full
// objects of its shard only.
type Sharding struct {
	// Name names the ring: its label, and its Leases (<Name>-<identity>,
	// <Name>-sharder). A label name segment. Empty: no sharding.
	Name string
	// Namespace of the Leases. Default: Options.Namespace, or "default".
	Namespace string
	// Identity of this replica: a label value. Default: the host name,
	// cut to fit, and a random suffix.
	Identity string
	// LeaseDuration is how long the others wait, after a replica last
	// renewed its Lease, before giving its objects away. Default: 15 s.
	LeaseDuration time.Duration
	// RenewDeadline is how long a replica may act after the start of its
	// last successful renewal: past it, it stops reconciling and makes
	// Start return an error. Default: 10 s.
	RenewDeadline time.Duration
	// RetryPeriod is how often Leases are renewed. Default: 2 s.
	RetryPeriod time.Duration
}

// sharding is a manager's resolved Sharding.
type sharding struct {
	ring, namespace, identity string
	member, sharder           leader.Config
	label, drain              string

	mu    sync.Mutex
	types []shardedType // one per sharded controller
}

// shardedType is a sharded controller's objects, as the sharder sees them.
type shardedType struct {
	res  APIResource
	opts CacheOptions // the controller's, without the shard selector
}

// shardingConfig resolves and checks opts.Sharding.
func shardingConfig(opts Options) (*sharding, error) {
	sh := opts.Sharding
	if opts.LeaderElection.Name != "" {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding and LeaderElection: choose one; sharded replicas all reconcile")
	}
	if errs := validation.IsDNS1123Label(sh.Name); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Name %q: %s", sh.Name, errs[0])
	}
	if sh.Namespace == "" {
		sh.Namespace = opts.Namespace
	}
	if sh.Namespace == "" {
		sh.Namespace = "default"
	}
	if sh.Identity == "" {
		host, _ := os.Hostname()
		host = strings.ToLower(strings.Trim(host, "-."))
		if len(host) > 40 {
			host = host[:40]
		}
		sh.Identity = strings.Trim(host, "-.") + "-" + rand.String(8)
	}
	if errs := validation.IsDNS1123Label(sh.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Identity %q: %s", sh.Identity, errs[0])
	}
	if sh.LeaseDuration == 0 {
		sh.LeaseDuration = 15 * time.Second
	}
	if sh.RenewDeadline == 0 {
		sh.RenewDeadline = 10 * time.Second
	}
	if sh.RetryPeriod == 0 {
		sh.RetryPeriod = 2 * time.Second
	}
	s := &sharding{ring: sh.Name, namespace: sh.Namespace, identity: sh.Identity,
		label: shard.Label(sh.Name), drain: shard.DrainLabel(sh.Name)}
	s.member = leader.Config{Name: shard.LeaseName(sh.Name, sh.Identity), Namespace: sh.Namespace, Identity: sh.Identity,
		LeaseDuration: sh.LeaseDuration, RenewDeadline: sh.RenewDeadline, RetryPeriod: sh.RetryPeriod,
		Labels: map[string]string{shard.RingLabel: sh.Name}}
	s.sharder = s.member
	s.sharder.Name, s.sharder.Labels = shard.SharderLease(sh.Name), nil
	log := opts.Logger.WithValues("ring", sh.Name, "identity", sh.Identity)
	s.member.Log = log.WithValues("lease", sh.Namespace+"/"+s.member.Name)
	s.sharder.Log = log.WithValues("lease", sh.Namespace+"/"+s.sharder.Name)
	if err := s.member.Validate(); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	return s, nil
}

// shardOptions makes a controller's cache options select its shard, and
// records the controller's objects for the sharder.
func (s *sharding) shardOptions(info APIResource, opts CacheOptions) CacheOptions {
	s.mu.Lock()
	s.types = append(s.types, shardedType{res: info, opts: opts})
	s.mu.Unlock()
	req, _ := labels.NewRequirement(s.label, labelop.Equals, []string{s.identity})
	sel := labels.NewSelector()
	if opts.LabelSelector != nil {
		if reqs, ok := opts.LabelSelector.Requirements(); ok {
			sel = sel.Add(reqs...)
		}
	}
	opts.LabelSelector = sel.Add(*req)
	return opts
}

// shard runs the controllers while this replica holds its membership, and
// campaigns to be the sharder meanwhile.
func (m *Manager) shard(run, ctx context.Context, ctrls []managedController) error {
	b, err := bind[*coordinationv1.Lease](m, APIResource{})
	if err != nil {
		return err
	}
	s := m.sharding
	member, sharder := s.member, s.sharder
	member.Leases, sharder.Leases = leases{b, s.namespace}, leases{b, s.namespace}
	m.log.Info("joining the ring", "ring", s.ring, "identity", s.identity)
	var leadErr error
	err = leader.Run(run, member, func(memberCtx context.Context, t *leader.Term) {
		var wg sync.WaitGroup
		wg.Go(func() {
			err := leader.Run(memberCtx, sharder, func(sctx context.Context, _ *leader.Term) { m.runSharder(sctx) })
			if err != nil && memberCtx.Err() == nil {
				m.fatal(fmt.Errorf("ctrl: sharder of ring %s: %w", s.ring, err))
			}
		})
		leadErr = m.lead(memberCtx, leader.WithTerm(ctx, t), ctrls)
		wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("ctrl: membership of ring %s: %w", s.ring, err)
	}
	return leadErr
}

// release lets an object go when the sharder asks: its shard label is
// removed, in the object's own worker, so no reconcile of it runs here any
// more. It reports whether the object was being drained.
func (c *Controller[T]) release(ctx context.Context, obj T) (bool, error) {
	s := c.mgr.sharding
	if s == nil || obj.GetLabels()[s.drain] == "" {
		return false, nil
	}
	let := obj.DeepCopyObject().(T)
	lbls := maps.Clone(let.GetLabels())
	delete(lbls, s.label)
	let.SetLabels(lbls)
	_, err := c.client.InCluster(ClusterFrom(ctx)).PatchFrom(ctx, obj, let)
	if err == nil {
		c.log.V(1).Info("let an object go to another replica", "object", KeyOf(obj))
	}
	return true, IgnoreNotFound(err)
}

// runSharder assigns the objects of every sharded type to the live
// members, while this replica is the sharder. A change of an object wakes
// it for that object alone; a change of the live members, a relist, and a
// tick of RetryPeriod (which is how a member whose Lease went stale is
// found dead) make it look at every object: O(objects) per RetryPeriod,
// never per change.
func (m *Manager) runSharder(ctx context.Context) {
	s := m.sharding
	log := m.log.WithValues("ring", s.ring)
	log.Info("sharding the ring's objects")
	kick := make(chan struct{}, 1)
	leases, err := newCache(m, CacheOptions{Namespaces: []string{s.namespace},
		LabelSelector: labels.SelectorFromSet(labels.Set{shard.RingLabel: s.ring})}, handler[*coordinationv1.Lease](poker[*coordinationv1.Lease]{kick: kick}))
	if err != nil {
		m.fatal(fmt.Errorf("ctrl: sharder of ring %s: %w", s.ring, err))
		return
	}
	s.mu.Lock()
	types := slices.Clone(s.types)
	s.mu.Unlock()
	type target struct {
		cache   *Cache[*metav1.PartialObjectMetadata]
		client  *Client[*metav1.PartialObjectMetadata]
		changed *changedKeys
	}
	var targets []target
	for _, st := range types {
		opts := st.opts
		opts.Resource = st.res
		changed := &changedKeys{}
		c, err := makeCache(m, opts, use[*metav1.PartialObjectMetadata]{
			handler: poker[*metav1.PartialObjectMetadata]{kick, changed}, private: "sharder", trim: trimForSharder, pin: true})
		var cl *Client[*metav1.PartialObjectMetadata]
		if err == nil {
			cl, err = NewClient[*metav1.PartialObjectMetadata](m, ClientOptions{Resource: st.res})
		}
		if err == nil {
			err = c.WaitForSync(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				m.fatal(fmt.Errorf("ctrl: sharder of ring %s: %w", s.ring, err))
			}
			return
		}
		targets = append(targets, target{c, cl, changed})
	}
	if leases.WaitForSync(ctx) != nil {
		return
	}
	obs := map[string]observed{} // lease name -> last change seen
	since := map[Key]time.Time{} // objects seen without a live owner, since when
	tick := time.NewTicker(s.member.RetryPeriod)
	defer tick.Stop()
	full := true
	var last []string // the members of the last round
	for {
		live := liveMembers(leases.List(s.namespace, nil), obs, time.Now())
		members := make([]string, 0, len(live))
		for id := range live {
			members = append(members, id)
		}
		slices.Sort(members)
		full = full || !slices.Equal(members, last)
		last = members
		// Patches go out several at once: a dead replica's thousands of
		// objects move in a second or two, not one round trip at a time.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		began, writes := time.Now(), 0
		owned := map[string]int{}
		for _, t := range targets {
			objs := t.changed.take(t.cache, full)
			for _, o := range objs {
				if full {
					if owner := o.Labels[s.label]; live[owner] {
						owned[owner]++
					} else {
						owned[""]++
					}
				}
				if patch := m.shardStep(o, members, live, since); patch != nil {
					writes++
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						if !patch(ctx, t.client) {
							t.changed.add(KeyOf(o)) // again on the next round
						}
					})
				}
			}
		}
		wg.Wait()
		if full {
			for k := range since { // objects deleted while they had no owner
				if !slices.ContainsFunc(targets, func(t target) bool { _, ok := t.cache.Get(k); return ok }) {
					delete(since, k)
				}
			}
			m.metrics.ShardObjects.DeletePartialMatch(prometheus.Labels{"ring": s.ring}) // replicas that left go with their series
			for owner, n := range owned {
				m.metrics.ShardObjects.WithLabelValues(s.ring, owner).Set(float64(n))
			}
		}
		if writes > 0 {
			log.V(1).Info("sharded", "members", members, "writes", writes, "took", time.Since(began).Round(time.Millisecond).String())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			full = true
		case <-kick:
			full = false
		}
	}
}

// trimForSharder keeps what the sharder and the cache's selectors read of
// an object: its identity, resourceVersion and labels. The sharder caches
// every object of the ring, so each byte counts.
func trimForSharder(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels}}
}

// changedKeys are the objects of one sharded type that changed since the
// sharder last looked.
type changedKeys struct {
	mu   sync.Mutex
	keys map[Key]struct{}
	all  bool // the cache relisted: every object needs a look
}

func (c *changedKeys) add(k Key) {
	c.mu.Lock()
	if c.keys == nil {
		c.keys = map[Key]struct{}{}
	}
	c.keys[k] = struct{}{}
	c.mu.Unlock()
}

// take returns the objects to look at now, and forgets them: every cached
// object when full (or when one was asked for), else those that changed.
func (c *changedKeys) take(cache *Cache[*metav1.PartialObjectMetadata], full bool) []*metav1.PartialObjectMetadata {
	c.mu.Lock()
	keys, all := c.keys, c.all
	c.keys, c.all = nil, false
	c.mu.Unlock()
	if full || all {
		return cache.List("", nil)
	}
	objs := make([]*metav1.PartialObjectMetadata, 0, len(keys))
	for k := range keys {
		if o, ok := cache.Get(k); ok {
			objs = append(objs, o)
		}
	}
	return objs
}

// observed is when the sharder last saw a membership Lease change.
type observed struct {
	rv string
	at time.Time
}

// liveMembers returns the identities whose Leases are held and were
// renewed, as far as the sharder has seen, within their duration: the
// sharder's own clock measures it, so clock skew does not matter.
func liveMembers(leases []*coordinationv1.Lease, obs map[string]observed, now time.Time) map[string]bool {
	live := map[string]bool{}
	for _, l := range leases {
		o, ok := obs[l.Name]
		if !ok || o.rv != l.ResourceVersion {
			o = observed{l.ResourceVersion, now}
			obs[l.Name] = o
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		d := 15 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if holder != "" && now.Sub(o.at) < d {
			live[holder] = true
		}
	}
	return live
}

// shardStep decides the next step for one object, and returns the write
// that takes it, or nil.
func (m *Manager) shardStep(o *metav1.PartialObjectMetadata, members []string, live map[string]bool,
	since map[Key]time.Time) func(context.Context, *Client[*metav1.PartialObjectMetadata]) bool {
	s := m.sharding
	cur := o.Labels[s.label]
	want := shard.Owner(shard.Key(o.Namespace, o.Name), members)
	key := KeyOf(o)
	orphan := cur == "" || !live[cur]
	began, seen := since[key]
	if orphan && !seen {
		began = time.Now()
		since[key] = began
	}
	var patch string
	switch shard.Decide(cur, o.Labels[s.drain] != "", want, live[cur]) {
	case shard.Assign:
		patch = fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:%q,%q:null}}}`, o.ResourceVersion, s.label, want, s.drain)
	case shard.Drain:
		patch = fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:"true"}}}`, o.ResourceVersion, s.drain)
	case shard.Undrain:
		patch = fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:null}}}`, o.ResourceVersion, s.drain)
	default:
		if !orphan {
			delete(since, key)
		}
		return nil
	}
	if orphan && want != "" {
		delete(since, key) // a failed write is retried, and its time counted, from the next round
	}
	return func(ctx context.Context, cl *Client[*metav1.PartialObjectMetadata]) bool {
		if _, err := cl.Patch(ctx, key, types.MergePatchType, []byte(patch)); err != nil {
			if ctx.Err() == nil {
				m.log.V(1).Info("sharder: a patch failed; retrying on the next round", "object", key, "err", err.Error())
			}
			return IgnoreNotFound(err) == nil // gone: nothing to retry
		}
		if orphan && want != "" {
			m.metrics.ShardUnowned.WithLabelValues(s.ring).Observe(time.Since(began).Seconds())
			if cur != "" {
				m.metrics.ShardHandovers.WithLabelValues(s.ring).Inc()
			}
		}
		return true
	}
}

// poker is a handler that wakes the sharder on every change, and notes
// which object changed.
type poker[T Object] struct {
	kick chan struct{}
	keys *changedKeys // nil for Leases: their changes only wake
}

func (p poker[T]) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p poker[T]) changed(ev event[T]) {
	if p.keys != nil {
		p.keys.add(ev.key)
	}
	p.poke()
}

func (p poker[T]) listed(evs []event[T]) {
	if p.keys != nil {
		p.keys.mu.Lock()
		p.keys.all = true
		p.keys.mu.Unlock()
	}
	p.poke()
}

func (p poker[T]) joined(string) {}
