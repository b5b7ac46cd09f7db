package ctrl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelop "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prometheus/client_golang/prometheus"
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
//     gives an object up calls neither OnDelete nor OnFinalize, and keeps
//     no finalizer from the next owner; moves pass every update filter,
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

// Modes of a ring, as /readyz and ctrl_shard_mode name them.
const (
	shardModeServer = "server" // the API server selects by hash
	shardModeLabels = "labels" // caches select on the shard label
)

// sharding is a manager's resolved Sharding, and the state of this
// replica's membership: what it serves, the reconciles running on it, and
// what it publishes in its Lease.
type sharding struct {
	ring, namespace, identity string
	byNamespace, byLabel      bool
	member                    leader.Config
	label                     string // the shard label's key
	field                     string // what the server hashes
	obs                       *leader.Observer

	leases     *Cache[*coordinationv1.Lease]
	namespaces *Cache[*metav1.PartialObjectMetadata] // ByNamespace only
	kick       chan struct{}                         // wakes the ring's loop
	pokes      atomic.Uint64                         // changes that woke it, or will
	handovers  *prometheus.CounterVec

	// probes tell whether the API server selects each sharded type by
	// hash; set while wiring.
	probes   []func(ctx context.Context) (bool, error)
	labelers []labeler
	primary  map[any]func() int // the objects each sharded controller's cache holds

	modeSet chan struct{} // closed once mode is known
	mode    string

	// mu guards what follows. It is a leaf: a cache calls serves, which
	// takes it, while holding the cache's own lock, so nothing may call
	// into a cache while holding mu.
	mu       sync.Mutex
	serving  shard.Set       // what this replica serves now
	view     *shardView      // what caches filter on; replaced on every change
	inflight map[*entry]bool // reconciles running, by entry
	left     chan struct{}   // receives when a reconcile leaves
	settled  bool            // the ring's last step found nothing to do
	share    float64         // of the units, served
	looked   uint64          // pokes before the ring's last round began
	members  int
	labeled  map[Key]string // objects labeled, at the version labeled
	held     shard.Set      // published in the Lease
	gen      uint64         // of held
	stored   uint64         // the generation the API server last stored
	storedCh chan struct{}
	wake     chan struct{}
}

// shardView is what a sharded cache selects at one moment; changed is
// closed when a newer view replaces it.
type shardView struct {
	serving    shard.Set
	namespaces []string // ByNamespace in label mode: the values to select
	changed    chan struct{}
}

// entry is a reconcile running on this replica, at a point of the space.
type entry struct {
	point  uint64
	cancel context.CancelCauseFunc
}

// errMoved is the cause of a reconcile's context canceled because its
// object's part of the space is being given to another replica.
var errMoved = errors.New("ctrl: the object is moving to another replica")

// shardingConfig resolves and checks opts.Sharding.
func shardingConfig(opts Options) (*sharding, error) {
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
		sh.Identity = strings.Trim(strings.ReplaceAll(host, ".", "-"), "-") + "-" + rand.String(8)
		sh.Identity = strings.TrimLeft(sh.Identity, "-")
	}
	if errs := validation.IsDNS1123Label(sh.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding.Identity %q: %s", sh.Identity, errs[0])
	}
	s := &sharding{ring: sh.Ring, namespace: sh.Namespace, identity: sh.Identity, byNamespace: sh.ByNamespace, byLabel: sh.ByLabel,
		label: shard.Label(sh.Ring), field: "object.metadata.uid", obs: &leader.Observer{},
		kick: make(chan struct{}, 1), modeSet: make(chan struct{}), inflight: map[*entry]bool{}, primary: map[any]func() int{}, labeled: map[Key]string{},
		left: make(chan struct{}, 1), storedCh: make(chan struct{}), wake: make(chan struct{}, 1)}
	if sh.ByNamespace {
		s.field = "object.metadata.namespace"
	}
	s.view = &shardView{changed: make(chan struct{})}
	s.member = leader.Config{Name: shard.LeaseName(sh.Ring, sh.Identity), Namespace: sh.Namespace, Identity: sh.Identity,
		LeaseDuration: sh.LeaseDuration, RenewDeadline: sh.RenewDeadline, RetryPeriod: sh.RetryPeriod,
		Labels: map[string]string{shard.RingLabel: sh.Ring}, Observer: s.obs, DeleteOnRelease: true,
		Annotations: s.annotations, Wake: s.wake, Written: s.written}
	s.member.Default()
	s.member.Log = opts.Logger.WithValues("ring", sh.Ring, "identity", sh.Identity, "lease", sh.Namespace+"/"+s.member.Name)
	if err := s.member.Validate(); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	return s, nil
}

// wireSharding makes the caches the ring's loop reads: the ring's Leases,
// and with ByNamespace the namespaces, metadata only. Each change wakes
// the loop.
func (m *Manager) wireSharding() error {
	s := m.sharding
	s.handovers = m.metrics.ShardHandovers
	var err error
	s.leases, err = makeCache(m, CacheOptions{Namespaces: []string{s.namespace},
		LabelSelector: labels.SelectorFromSet(labels.Set{shard.RingLabel: s.ring})},
		use[*coordinationv1.Lease]{handler: poker[*coordinationv1.Lease]{s}, private: "shard-ring", pin: true})
	if err == nil && s.byNamespace {
		s.namespaces, err = makeCache(m, CacheOptions{Resource: APIResource{Version: "v1", Resource: "namespaces", Kind: "Namespace"}},
			use[*metav1.PartialObjectMetadata]{handler: poker[*metav1.PartialObjectMetadata]{s}, private: "shard-ring", trim: trimToName, pin: true})
	}
	if err != nil {
		return fmt.Errorf("ctrl: NewManager: Sharding: %w", err)
	}
	return nil
}

// trimToName keeps what the ring reads of a namespace: its name.
func trimToName(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: o.Name, ResourceVersion: o.ResourceVersion}}
}

// shardCache makes a sharded controller's cache options select its share,
// and, for the controller's own cache (primary), has the type probed for
// server-side selection and, in label mode, labeled. Two controllers of
// one type with equal options share the cache and its labeler.
func shardCache[T Object](m *Manager, opts CacheOptions, primary bool) (CacheOptions, error) {
	s := m.sharding
	info, err := binding.InfoFor[T](resourceInfo[T](opts.Resource))
	if err != nil {
		return opts, err
	}
	if !info.Namespaced && s.byNamespace {
		if primary {
			return opts, fmt.Errorf("Sharding.ByNamespace: %s is cluster-scoped", info)
		}
		return opts, nil // not sharded: all of it on every replica
	}
	opts.shard = &shardScope{s: s, related: !primary}
	if !primary {
		return opts, nil
	}
	b, err := bind[T](m, opts.Resource)
	if err != nil {
		return opts, err
	}
	m.need(info.GVR.GroupResource(), "patch") // label mode labels the objects
	// A namespace the program may list in, to probe the server's selection.
	ns := m.opts.Namespace
	if len(opts.Namespaces) > 0 {
		ns = opts.Namespaces[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes = append(s.probes, func(ctx context.Context) (bool, error) {
		l, err := b.List(ctx, ns, metav1.ListOptions{Limit: 1, ShardSelector: shard.All.Selector(s.field)})
		if err != nil {
			return false, fmt.Errorf("probing %s: %w", info, err)
		}
		return l.ShardInfo != nil, nil
	})
	// In label mode, a labeler watches the type's objects in the
	// controller's scope that carry no valid shard label yet.
	sel := labels.NewSelector()
	if opts.LabelSelector != nil {
		if reqs, ok := opts.LabelSelector.Requirements(); ok {
			sel = sel.Add(reqs...)
		}
	}
	var unlabeled *labels.Requirement
	if s.byNamespace {
		unlabeled, err = labels.NewRequirement(s.label, labelop.DoesNotExist, nil)
	} else {
		buckets := make([]string, shard.Buckets)
		for b := range buckets {
			buckets[b] = strconv.Itoa(b)
		}
		unlabeled, err = labels.NewRequirement(s.label, labelop.NotIn, buckets)
	}
	if err != nil {
		return opts, err
	}
	lopts := CacheOptions{Namespaces: opts.Namespaces, LabelSelector: sel.Add(*unlabeled), FieldSelector: opts.FieldSelector,
		Resource: apiResource(info)}
	id := fmt.Sprintf("%s %s", info, newScope(info, m.opts.Namespace, lopts))
	if !slices.ContainsFunc(s.labelers, func(l labeler) bool { return l.id == id }) {
		// Labels are written through a client of T, so that WaitIdle waits
		// for the controller's cache to see them.
		cl, err := NewClient[T](m, ClientOptions{Resource: opts.Resource})
		if err != nil {
			return opts, err
		}
		s.labelers = append(s.labelers, labeler{id: id, opts: lopts, patch: func(ctx context.Context, key Key, data []byte) error {
			_, err := cl.Patch(ctx, key, types.MergePatchType, data)
			return err
		}})
	}
	return opts, nil
}

// startLabelers starts a cache of each sharded type's unlabeled objects,
// metadata only, in label mode; each change wakes the ring's loop.
func (m *Manager) startLabelers() error {
	s := m.sharding
	for i := range s.labelers {
		l := &s.labelers[i]
		if l.cache != nil {
			continue
		}
		c, err := makeCache(m, l.opts, use[*metav1.PartialObjectMetadata]{
			handler: poker[*metav1.PartialObjectMetadata]{s}, private: "shard-labels", trim: trimForLabeler, pin: true})
		if err != nil {
			return fmt.Errorf("ctrl: ring %s: %w", s.ring, err)
		}
		l.cache = c
	}
	return nil
}

// trimForLabeler keeps what the labeler reads of an object.
func trimForLabeler(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels}}
}

// labeler is the cache of one sharded type's unlabeled objects, made once
// the ring is known to need labels, and what labels them.
type labeler struct {
	id    string // type and scope: one labeler for controllers of one type alike
	opts  CacheOptions
	cache *Cache[*metav1.PartialObjectMetadata]
	patch func(ctx context.Context, key Key, data []byte) error
}

// shardScope marks a cache as sharded. A related cache (owned by a
// sharded controller) is filtered only where the server selects by
// namespace; the objects of other types are not labeled.
type shardScope struct {
	s       *sharding
	related bool
}

// detect decides the ring's mode: server-side selection if the API server
// answers a sharded list of every sharded type with the shard it applied,
// labels otherwise. It retries until it can tell.
func (s *sharding) detect(ctx context.Context, log func(string, ...any)) {
	s.mu.Lock()
	probes := slices.Clone(s.probes)
	s.mu.Unlock()
	mode := shardModeServer
	if s.byLabel {
		mode, probes = shardModeLabels, nil
	}
	for _, probe := range probes {
		for {
			ok, err := probe(ctx)
			if err == nil {
				if !ok {
					mode = shardModeLabels
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			log("cannot tell whether the API server selects by hash; retrying", "err", err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if mode == shardModeLabels {
			break
		}
	}
	s.mode = mode
	close(s.modeSet)
}

// modeNow returns the ring's mode, or "" while it is not known.
func (s *sharding) modeNow() string {
	select {
	case <-s.modeSet:
		return s.mode
	default:
		return ""
	}
}

// modeIs reports whether the ring's mode is known to be mode.
func (s *sharding) modeIs(mode string) bool { return s.modeNow() == mode }

// waitMode waits until the mode is known, and reports whether it is.
func (s *sharding) waitMode(ctx context.Context) bool {
	select {
	case <-s.modeSet:
		return true
	case <-ctx.Done():
		return false
	}
}

// filters reports whether a cache of this scope selects a share now: a
// controller's own cache always; a related one only where the server
// selects by namespace.
func (sc *shardScope) filters() bool {
	return !sc.related || sc.s.modeIs(shardModeServer) && sc.s.byNamespace
}

// byLabel reports whether a cache of this scope selects its share by the
// shard label.
func (sc *shardScope) byLabel() bool { return sc.filters() && sc.s.modeIs(shardModeLabels) }

// point returns where obj is in the hash space, as the cache's selection
// places it: by the hashed field where the server selects, by the shard
// label in label mode. An object without a valid label is nowhere.
func (s *sharding) point(obj Object, related bool) (uint64, bool) {
	if s.modeIs(shardModeServer) || related {
		if s.byNamespace {
			return shard.Hash(obj.GetNamespace()), true
		}
		return shard.Hash(string(obj.GetUID())), true
	}
	v, ok := obj.GetLabels()[s.label]
	if !ok {
		return 0, false
	}
	if s.byNamespace {
		return shard.Hash(v), true
	}
	b, err := strconv.Atoi(v)
	if err != nil || b < 0 || b >= shard.Buckets || strconv.Itoa(b) != v {
		return 0, false
	}
	return shard.BucketSpan(b).First, true
}

// labelFor returns the shard label an object should carry, and the point
// it places the object at.
func (s *sharding) labelFor(obj Object) (string, uint64) {
	if s.byNamespace {
		return obj.GetNamespace(), shard.Hash(obj.GetNamespace())
	}
	b := shard.BucketOf(shard.Hash(string(obj.GetUID())))
	return strconv.Itoa(b), shard.BucketSpan(b).First
}

// serves reports whether this replica serves obj now; for a cache of the
// scope that does not filter, always.
func (sc *shardScope) serves(obj Object) bool {
	if sc == nil || !sc.filters() {
		return true
	}
	p, ok := sc.s.point(obj, sc.related)
	if !ok {
		return false
	}
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	return sc.s.serving.Contains(p)
}

// holdsAll reports whether a cache of this scope holds every object of
// namespace ns: unsharded, or sharded by namespace where the server
// selects and ns is served here. A cache sharded by UID or by label holds
// no namespace whole.
func (sc *shardScope) holdsAll(ns string) bool {
	if sc == nil || sc.related && !sc.filters() {
		return true
	}
	if ns == "" || !sc.s.byNamespace || !sc.filters() || !sc.s.modeIs(shardModeServer) {
		return false
	}
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	return sc.s.serving.Contains(shard.Hash(ns))
}

// current returns the view caches filter on now.
func (s *sharding) current() *shardView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// labelNamespaces returns the namespaces a cache selects by label in
// label mode with ByNamespace, to be served: all of them, read before
// taking s.mu, which is never held while calling into a cache (a cache
// calls serves, which takes s.mu, while it holds its own lock).
func (s *sharding) labelNamespaces() []string {
	if !s.byNamespace || !s.modeIs(shardModeLabels) || s.namespaces == nil {
		return nil
	}
	var names []string
	for _, ns := range s.namespaces.List("", nil) {
		names = append(names, ns.Name)
	}
	return names
}

// setViewLocked replaces the view, which restarts the sharded caches'
// watches; names are labelNamespaces'. Called with s.mu held.
func (s *sharding) setViewLocked(names []string) {
	v := &shardView{serving: s.serving, changed: make(chan struct{})}
	if s.byNamespace && s.modeIs(shardModeLabels) {
		for _, ns := range names {
			if s.serving.Contains(shard.Hash(ns)) {
				v.namespaces = append(v.namespaces, ns)
			}
		}
		slices.Sort(v.namespaces)
		if s.view != nil && slices.Equal(v.namespaces, s.view.namespaces) && v.serving.Equal(s.view.serving) {
			return
		}
	}
	old := s.view
	s.view = v
	close(old.changed)
}

// selection is what a sharded feed adds to its list and watch options for
// view: a shard selector where the server selects by hash, a label
// requirement otherwise. It reports false when the view selects nothing.
func (sc *shardScope) selection(v *shardView) (shardSel string, label *labels.Requirement, any bool) {
	if !sc.filters() {
		return "", nil, true
	}
	if v.serving.Empty() {
		return "", nil, false
	}
	s := sc.s
	if s.modeIs(shardModeServer) {
		return v.serving.Selector(s.field), nil, true
	}
	var values []string
	if s.byNamespace {
		values = v.namespaces
	} else {
		for b := range shard.Buckets {
			if v.serving.Covers(shard.BucketSpan(b)) {
				values = append(values, strconv.Itoa(b))
			}
		}
	}
	if len(values) == 0 {
		return "", nil, false
	}
	req, err := labels.NewRequirement(s.label, labelop.In, values)
	if err != nil {
		return "", nil, false // a namespace is always a valid label value
	}
	return "", req, true
}

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
		s.share = unitsServed(r.Units(), r.Serving())
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

// unitsServed returns the part of units, from 0 to 1, that serving holds.
func unitsServed(units []shard.Span, serving shard.Set) float64 {
	if len(units) == 0 {
		return 0
	}
	n := 0
	for _, u := range units {
		if serving.Covers(u) {
			n++
		}
	}
	return float64(n) / float64(len(units))
}

// label gives the objects this replica serves that carry no shard label
// yet their label, and returns how many it wrote.
func (m *Manager) label(ctx context.Context) int {
	s := m.sharding
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	n := 0
	for _, l := range s.labelers {
		for _, o := range l.cache.List("", nil) {
			v, p := s.labelFor(o)
			key := KeyOf(o)
			s.mu.Lock()
			rv, tried := s.labeled[key]
			mine := s.serving.Contains(p) && (!tried || rv != o.ResourceVersion)
			if mine {
				s.labeled[key] = o.ResourceVersion // not again until the object changes
			}
			s.mu.Unlock()
			if !mine {
				continue
			}
			n++
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				patch := shard.LabelPatch(o.ResourceVersion, s.label, v)
				err := l.patch(ctx, key, patch)
				switch {
				case err == nil:
					m.metrics.ShardLabels.WithLabelValues(s.ring).Inc()
				case ctx.Err() == nil && IgnoreNotFound(err) != nil:
					m.log.V(1).Info("cannot label an object for its shard; trying again", "object", key, "err", err.Error())
					s.mu.Lock()
					delete(s.labeled, key)
					s.mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Forget the objects that left the labelers' caches: labeled, or gone.
	s.mu.Lock()
	tried := slices.Collect(maps.Keys(s.labeled))
	s.mu.Unlock()
	for _, key := range tried {
		if !slices.ContainsFunc(s.labelers, func(l labeler) bool { _, ok := l.cache.Get(key); return ok }) {
			s.mu.Lock()
			delete(s.labeled, key)
			s.mu.Unlock()
		}
	}
	return n
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

// busy says why the ring is not settled: a replica that is moving towards
// its share, or labeling, is not idle.
func (s *sharding) busy() string {
	select {
	case <-s.modeSet:
	default:
		return fmt.Sprintf("ring %s: detecting whether the API server selects by hash", s.ring)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.settled:
		return fmt.Sprintf("ring %s: taking its share", s.ring)
	case s.pokes.Load() != s.looked:
		return fmt.Sprintf("ring %s: looking at a change", s.ring)
	}
	return ""
}

// state is the ring's line in /readyz.
func (s *sharding) state() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	mode := s.modeNow()
	if mode == "" {
		mode = "not yet known"
	}
	units := "64 buckets of the hash space"
	if s.byNamespace {
		units = "namespaces"
	}
	return fmt.Sprintf("ring %s: mode %s, serving %.3f of the %s among %d members",
		s.ring, mode, s.share, units, s.members)
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

// IdentityFrom returns, inside a reconcile, the identity of the replica
// running it ([Manager.Identity]): "" without leader election and
// sharding, and outside a reconcile. Stamp it on what the replica writes
// to tell which replica did it.
func IdentityFrom(ctx context.Context) string {
	if ri, ok := ctx.Value(reconcileKey{}).(*reconcileInfo); ok {
		return ri.identity
	}
	return ""
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
