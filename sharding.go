package ctrl

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/shard"
)

// Sharding splits the objects of a program's controllers among its
// replicas, so that N replicas share the work and each caches about 1/N of
// the objects. Each replica holds a membership Lease; every replica
// computes the same split of the objects among the live members and takes
// its share, publishing in its Lease what it claims. There is no
// coordinator: Kubernetes itself is the engine, with Leases and selected
// lists and watches, and no other store.
//
// Objects are placed by the 64-bit FNV-1a hash of their UID, or, with
// ByNamespace, of their namespace, so that all the objects of a namespace
// share a replica. Where the API server offers it (the
// ShardedListAndWatch feature, alpha since Kubernetes 1.36), each replica
// lists and watches its share only (ListOptions.ShardSelector), and
// sharding writes nothing to any object. Elsewhere, or with ByLabel, each
// object carries a label (shard.ctrl.dev/<Ring>) with its part of the
// space, written once by the replica that serves it, and caches select on
// that. The mode is the whole ring's, decided at the start, logged, and
// shown in /readyz and ctrl_shard_mode.
//
// Guarantees, for each sharded controller:
//   - One owner: no two replicas reconcile an object at once, nor run its
//     OnDelete or OnFinalize. A replica serves a part of the space only
//     after claiming it in its Lease and reading, with a quorum read, that
//     no live replica claims it; it gives a part up only after no
//     reconcile of its objects runs any more (they are canceled at once),
//     and then publishes that. A replica whose membership ended (see
//     RenewDeadline) may still be running a reconcile that ignores its
//     canceled context, but every write it makes through ctrl's clients
//     fails with [ErrLeadershipLost], and its share is taken only
//     LeaseDuration after its last renewal began.
//   - A move is neither a deletion nor a selector exit: the replica that
//     gives an object up calls neither OnDelete nor OnFinalize, and leaves
//     its finalizer for the next owner; moves pass every update filter,
//     since the next owner lists the objects it takes.
//   - No orphans: the share of a replica that stops cleanly is taken as
//     soon as it has stopped (its Lease is deleted); that of one that died,
//     once its Lease expires, LeaseDuration after its last renewal began,
//     however long ago the others started; then its objects are listed and
//     reconciled by their new owners.
//   - No stop-the-world: a replica that joins takes its share as the
//     others give it up; the rest of the objects are not disturbed.
//
// The clocks of the replicas must agree to within LeaseDuration -
// RenewDeadline: a replica judges another's Lease expired from the
// renewTime written by the other's clock (see [LeaderElection]).
type Sharding struct {
	// Ring names the ring: the replicas of one program that share its
	// objects. Their Leases are named <Ring>.<identity> and labeled
	// ring.shard.ctrl.dev=<Ring>. A DNS label. Empty: no sharding.
	Ring string
	// Namespace of the Leases. Default: Options.Namespace, or "default".
	Namespace string
	// Identity of this replica: a DNS label, unique among the replicas
	// running at once; see [Manager.Identity] and [IdentityFrom]. Default:
	// the host name, cut to fit, and a random suffix.
	Identity string
	// ByNamespace places objects by their namespace instead of their UID:
	// every object of a namespace is served by one replica, and the caches
	// a sharded controller owns ([Owns]) hold the objects of this
	// replica's namespaces only, where the API server can select by hash.
	// It needs list and watch on namespaces, whose names are shared out
	// one by one. Default: by UID.
	ByNamespace bool
	// ByLabel selects each replica's objects by the shard label even where
	// the API server could select them by hash: for clusters where
	// ShardedListAndWatch, alpha, is not trusted, or not on in every API
	// server (the mode is decided once, from one answer). Default: by hash
	// where the server offers it.
	ByLabel bool
	// LeaseDuration is how long the others wait, after a replica last
	// renewed its Lease, before taking its share. Default: 15 s, or 1.5
	// times RenewDeadline if only that is set.
	LeaseDuration time.Duration
	// RenewDeadline is how long a replica may act after the start of its
	// last successful renewal: past it, it stops reconciling (its
	// reconciles are canceled and its writes through ctrl's clients fail)
	// and Start returns an error wrapping [ErrLeadershipLost]. Default:
	// two thirds of LeaseDuration (10 s).
	RenewDeadline time.Duration
	// RetryPeriod is how often Leases are renewed, and how often a replica
	// looks at the ring when nothing changed; it also looks when another
	// member's Lease is due to expire. Default: two fifteenths of
	// LeaseDuration (2 s).
	RetryPeriod time.Duration
}

// newSharding makes this replica's membership of the ring opts.Sharding
// names (internal/shard), and the caches it reads: the ring's Leases, and
// with ByNamespace the namespaces, metadata only.
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
	if sh.Namespace = cmpOr(sh.Namespace, opts.Namespace, "default"); sh.Identity == "" {
		host, _ := os.Hostname()
		host = strings.ToLower(strings.Trim(host, "-."))
		host = strings.Trim(strings.ReplaceAll(host[:min(len(host), 40)], ".", "-"), "-")
		sh.Identity = strings.TrimLeft(host+"-"+rand.String(8), "-")
	}
	if errs := validation.IsDNS1123Label(sh.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Identity %q: %s", sh.Identity, errs[0])
	}
	b, err := bind[*coordinationv1.Lease](m, APIResource{})
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	lease := leader.Config{Name: shard.LeaseName(sh.Ring, sh.Identity), Namespace: sh.Namespace, Identity: sh.Identity,
		LeaseDuration: sh.LeaseDuration, RenewDeadline: sh.RenewDeadline, RetryPeriod: sh.RetryPeriod,
		Leases: leases{b, sh.Namespace}}
	lease.Default()
	if err := lease.Validate(); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	lease.Log = opts.Logger.WithValues("ring", sh.Ring, "identity", sh.Identity, "lease", sh.Namespace+"/"+lease.Name)
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
			use[*metav1.PartialObjectMetadata]{handler: poker[*metav1.PartialObjectMetadata](member.Poke), private: "shard-ring", trim: trimToName, pin: true})
	}
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	return member, nil
}

// cmpOr returns the first of values that is not "".
func cmpOr(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// trimToName keeps what the ring reads of a namespace: its name.
func trimToName(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: o.Name, ResourceVersion: o.ResourceVersion}}
}

// shareOf asks the manager's policy for the share of a cache of b's type
// in scope sc, that *made is (once made): a controller's own objects, or,
// with related, objects a controller owns.
func shareOf[T Object](m *Manager, b *binding.Binding[T], related bool, sc scope, made **Cache[T]) (act.Share, error) {
	t := act.Type{Name: b.Info.String(), Namespaced: b.Namespaced, Related: related}
	if !related {
		ns := m.opts.Namespace
		if len(sc.namespaces) > 0 {
			ns = sc.namespaces[0]
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
		m.need(b.GVR.GroupResource(), "patch") // label mode labels the objects
	}
	return s, nil
}

// labeler watches the objects of a cache that carry no shard label yet,
// metadata only, in the cache's scope, and follows its namespaces.
type labeler[T Object] struct {
	c     *Cache[T]
	cache *Cache[*metav1.PartialObjectMetadata]
	poke  func()
}

func newLabeler[T Object](m *Manager, c *Cache[T], req labels.Requirement, poke func()) (act.Labeler, error) {
	sc := c.currentScope()
	sel := labels.NewSelector()
	if sc.labels != nil {
		reqs, _ := sc.labels.Requirements()
		sel = sel.Add(reqs...)
	}
	namespaces := sc.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	lc, err := makeCache(m, CacheOptions{Namespaces: namespaces, LabelSelector: sel.Add(req), FieldSelector: sc.fields,
		Resource: apiResource(c.b.Info), Optional: c.opt != nil},
		use[*metav1.PartialObjectMetadata]{private: fmt.Sprintf("shard labels of %p", c), trim: trimForLabeler})
	if err != nil {
		return nil, err
	}
	l := &labeler[T]{c: c, cache: lc, poke: poke}
	lc.addLiveHandler(poker[*metav1.PartialObjectMetadata](l.poke))
	c.addLiveHandler(l)
	return l, nil
}

// trimForLabeler keeps what the labeler reads of an object.
func trimForLabeler(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels}}
}

func (l *labeler[T]) List() []metav1.Object {
	var out []metav1.Object
	for _, o := range l.cache.List("", nil) {
		out = append(out, o)
	}
	return out
}

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

// The labeler is a handler of the cache it labels for: it hears nothing
// of its changes, and follows its namespaces.
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

// poker is a handler that wakes the ring's loop on every change.
type poker[T Object] func()

func (p poker[T]) changed(event[T])  { p() }
func (p poker[T]) listed([]event[T]) { p() }
