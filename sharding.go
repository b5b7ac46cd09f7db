package ctrl

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/scope"
	"github.com/typedctrl/ctrl/internal/shard"
)

// Sharding splits the objects of a program's controllers among its
// replicas, each reconciling and caching about 1/N of them, with a
// membership Lease each and no coordinator (docs/why.md#sharding; see the
// package's guarantees: One owner per object).
//
// Objects are placed by the FNV-1a hash of their UID, or namespace with
// ByNamespace. Where the server offers ShardedListAndWatch (alpha since
// 1.36) replicas list and watch their share only and write nothing;
// elsewhere, or with ByLabel, objects carry a label shard.ctrl.dev/<Ring>
// that caches select on. The ring's mode is decided at start, logged, and
// shown in /readyz and ctrl_shard_mode. The replicas' clocks must agree to
// within LeaseDuration - RenewDeadline.
type Sharding struct {
	// Ring names the ring: the replicas of one program that share its
	// objects. Their Leases are named <Ring>.<identity> and labeled
	// ring.shard.ctrl.dev=<Ring>. A DNS label. Empty: no sharding.
	Ring string
	// LeaseOptions: the membership Leases' namespace, this replica's
	// identity, and their timing; RetryPeriod is also how often the ring is
	// looked at. Past RenewDeadline, Start returns an error wrapping
	// [ErrLeadershipLost].
	LeaseOptions
	// ByNamespace places objects by namespace instead of UID: one replica
	// serves all of a namespace, and caches a sharded controller [Owns] hold
	// only its namespaces' objects where the server selects by hash. It needs
	// list and watch on namespaces. Default: by UID.
	ByNamespace bool
	// ByLabel selects by label even where the server could by hash (the mode is
	// decided from one server's answer). Default: by hash where offered.
	ByLabel bool
}

// newSharding joins the ring and caches its Leases (and namespaces), metadata only.
func newSharding(m *Manager, opts Options) (*shard.Member, error) {
	sh := opts.Sharding
	if opts.LeaderElection.Name != "" {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding and LeaderElection: choose one; sharded replicas all reconcile")
	}
	if errs := validation.IsDNS1123Label(sh.Ring); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Ring %q: %s", sh.Ring, errs[0])
	}
	if sh.ByNamespace && opts.Namespace != "" {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.ByNamespace in a manager restricted to namespace %q: one replica would serve everything", opts.Namespace)
	}
	lease, b, err := sh.lease(m, opts, "Sharding", func(id string) string { return shard.LeaseName(sh.Ring, id) })
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Label(lease.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Identity %q: %s", lease.Identity, errs[0])
	}
	sh.Namespace, sh.Identity = lease.Namespace, lease.Identity
	lease.Log = lease.Log.WithValues("ring", sh.Ring)
	var ring *Cache[*coordinationv1.Lease]
	var namespaces *Cache[*metav1.PartialObjectMetadata]
	ringSelector := metav1.ListOptions{LabelSelector: shard.RingLabel + "=" + sh.Ring}
	member := shard.New(shard.Config{Ring: sh.Ring, Identity: sh.Identity, ByNamespace: sh.ByNamespace, ByLabel: sh.ByLabel,
		Lease: lease, Metrics: m.metrics,
		Cached: func() []*coordinationv1.Lease { return ring.List(sh.Namespace, nil) },
		Fenced: func(ctx context.Context) ([]*coordinationv1.Lease, error) {
			l, err := b.List(ctx, sh.Namespace, ringSelector)
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		},
		Probe: func(ctx context.Context, sel string) (bool, error) {
			l, err := b.List(ctx, sh.Namespace, metav1.ListOptions{Limit: 1, ShardSelector: sel})
			return err == nil && l.ShardInfo != nil, err
		},
		Namespaces: func() []string {
			var names []string
			for _, ns := range namespaces.List("", nil) {
				names = append(names, ns.Name)
			}
			return names
		},
		Synced: func(ctx context.Context) error {
			if err := ring.WaitForSync(ctx); err != nil || namespaces == nil {
				return err
			}
			return namespaces.WaitForSync(ctx)
		},
		Round: func() { m.activity.Add(1) },
	})
	ring, err = makeCache(m, CacheOptions{Namespaces: []string{sh.Namespace},
		LabelSelector: labels.SelectorFromSet(labels.Set{shard.RingLabel: sh.Ring})},
		use[*coordinationv1.Lease]{handler: poker[*coordinationv1.Lease](member.Poke), private: "shard-ring", pin: true})
	if err == nil && sh.ByNamespace {
		namespaces, err = makeCache(m, CacheOptions{Resource: APIResource{Version: "v1", Resource: "namespaces", Kind: "Namespace"}},
			use[*metav1.PartialObjectMetadata]{handler: poker[*metav1.PartialObjectMetadata](member.Poke), private: "shard-ring", trim: shard.TrimToName, pin: true})
	}
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	return member, nil
}

// shareOf asks the policy for a cache's share (related: of owned objects).
func shareOf[T Object](m *Manager, b *binding.Binding[T], related bool, sc scope.Scope, made **Cache[T]) (act.Share, error) {
	t := act.Type{Name: b.Info.String(), Namespaced: b.Namespaced, Related: related}
	if !related {
		ns := m.opts.Namespace
		if len(sc.Namespaces) > 0 {
			ns = sc.Namespaces[0]
		}
		t.Probe = func(ctx context.Context, sel string) (bool, error) {
			l, err := b.List(ctx, ns, metav1.ListOptions{Limit: 1, ShardSelector: sel})
			if err != nil {
				return false, fmt.Errorf("probing %s: %w", b.Info, err)
			}
			return l.ShardInfo != nil, nil
		}
		t.Unlabeled = func(req labels.Requirement, poke func()) (act.Labeler, error) { return newLabeler(m, *made, req, poke) }
	}
	s, err := m.policy.Share(t)
	if err != nil {
		return nil, fmt.Errorf("ctrl: %w", err)
	}
	if s != nil && !related {
		m.grants.Need(b.GVR.GroupResource(), "patch") // label mode labels the objects
	}
	return s, nil
}

// labeler watches, metadata only, the cache's objects that carry no shard label yet.
type labeler[T Object] struct {
	c     *Cache[T]
	cache *Cache[*metav1.PartialObjectMetadata]
	poke  func()
}

func newLabeler[T Object](m *Manager, c *Cache[T], req labels.Requirement, poke func()) (act.Labeler, error) {
	sc := c.currentScope()
	sel := labels.NewSelector()
	if sc.Labels != nil {
		reqs, _ := sc.Labels.Requirements()
		sel = sel.Add(reqs...)
	}
	namespaces := sc.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	lc, err := makeCache(m, CacheOptions{Namespaces: namespaces, LabelSelector: sel.Add(req), FieldSelector: sc.Fields,
		Resource: apiResource(c.b.Info), Optional: c.opt != nil},
		use[*metav1.PartialObjectMetadata]{private: fmt.Sprintf("shard labels of %p", c), trim: shard.TrimForLabeler})
	if err != nil {
		return nil, err
	}
	l := &labeler[T]{c: c, cache: lc, poke: poke}
	lc.addLiveHandler(poker[*metav1.PartialObjectMetadata](l.poke))
	c.addLiveHandler(l)
	return l, nil
}

func (l *labeler[T]) List() []*metav1.PartialObjectMetadata { return l.cache.List("", nil) }

// Patch labels obj through a client of T, so that WaitIdle waits for the
// controller's cache to see the label.
func (l *labeler[T]) Patch(ctx context.Context, obj metav1.Object, patch []byte) error {
	c := &Client[T]{m: l.c.mgr, b: l.c.b}
	_, err := c.Patch(ctx, KeyOf(obj), types.MergePatchType, patch)
	return err
}

func (l *labeler[T]) Release() {
	l.c.removeHandler(l)
	l.c.mgr.unuse(l.cache)
}

// The labeler hears none of its cache's changes; it follows its namespaces.
func (l *labeler[T]) changed(event[T])  {}
func (l *labeler[T]) listed([]event[T]) {}
func (l *labeler[T]) rescoped(namespaces []string) {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	if err := l.cache.SetNamespaces(namespaces...); err != nil {
		l.c.mgr.log.Error(err, "the shard labeler cannot follow its cache's namespaces", "cache", l.c.String())
	}
	l.poke()
}

type poker[T Object] func()

func (p poker[T]) changed(event[T])  { p() }
func (p poker[T]) listed([]event[T]) { p() }
