package ctrl

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prometheus/client_golang/prometheus"
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
