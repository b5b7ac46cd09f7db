package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelop "k8s.io/apimachinery/pkg/selection"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// Modes of a ring, as /readyz and ctrl_shard_mode name them.
const (
	ModeServer = "server" // the API server selects by hash
	ModeLabels = "labels" // caches select on the shard label
)

// Config configures a [Member].
type Config struct {
	Ring, Identity string
	// ByNamespace places objects by the hash of their namespace, not of
	// their UID; ByLabel selects by label even where the server could
	// select by hash.
	ByNamespace, ByLabel bool
	// Lease is the election of the member's own Lease: its namespace,
	// identity, durations, client and log. New sets the rest.
	Lease   leader.Config
	Metrics *metrics.Set
	// Cached returns the ring's Leases as last watched; Fenced reads them
	// with a quorum read.
	Cached func() []*coordinationv1.Lease
	Fenced func(ctx context.Context) ([]*coordinationv1.Lease, error)
	// Probe lists at most one Lease with the shard selector sel, and
	// reports whether the server applied it: the ring's mode when no
	// sharded type can tell.
	Probe func(ctx context.Context, sel string) (bool, error)
	// Namespaces returns the cluster's namespaces, with ByNamespace.
	Namespaces func() []string
	// Synced returns once the watches behind Cached and Namespaces have
	// listed, or ctx is done.
	Synced func(ctx context.Context) error
	// Round is called after each round of the ring, for the idle check.
	Round func()
}

// Member is this replica's membership of a ring: the act.Policy of a
// sharded manager. It decides the ring's mode, holds the member's Lease,
// moves towards its share, and tells caches and workers what it serves.
type Member struct {
	cfg    Config
	label  string // the shard label's key
	field  string // what the server hashes
	obs    *leader.Observer
	kick   chan struct{} // wakes the ring's loop
	pokes  atomic.Uint64 // changes that woke it, or will
	wake   chan struct{} // asks the elector to publish now
	moded  chan struct{} // closed once mode is set
	mode   string
	gauges struct{ share, members, objects prometheus.Gauge }

	// mu guards what follows. It is a leaf: a cache asks Serves, which
	// takes it, under its own lock, so nothing calls into a cache under
	// mu.
	mu       sync.Mutex
	shares   []*share        // the primary shares, registered by controllers
	serving  Set             // what this replica serves now
	primary  *act.View       // what primary caches select now
	related  *act.View       // what related caches select now
	changed  chan struct{}   // closed when the views are replaced
	inflight map[*entry]bool // reconciles running, by entry
	left     chan struct{}   // receives when a reconcile leaves
	settled  bool            // the ring's last round found nothing to do
	fraction float64         // of the units, served
	looked   uint64          // pokes before the ring's last round began
	members  int
	labeled  map[string]string // objects labeled, at the version labeled
	held     Set               // published in the Lease
	gen      uint64            // of held
	stored   uint64            // the generation the API server last stored
	storedCh chan struct{}
}

// entry is a reconcile running on this replica, at a point of the space.
type entry struct {
	point  uint64
	cancel context.CancelCauseFunc
}

// New returns the membership cfg describes.
func New(cfg Config) *Member {
	m := &Member{cfg: cfg, label: Label(cfg.Ring), field: "object.metadata.uid", obs: &leader.Observer{},
		kick: make(chan struct{}, 1), wake: make(chan struct{}, 1), moded: make(chan struct{}),
		inflight: map[*entry]bool{}, left: make(chan struct{}, 1), labeled: map[string]string{},
		storedCh: make(chan struct{}), changed: make(chan struct{})}
	if cfg.ByNamespace {
		m.field = "object.metadata.namespace"
	}
	m.primary = &act.View{Changed: m.changed}
	m.related = m.primary
	l := &m.cfg.Lease
	l.Name = LeaseName(cfg.Ring, cfg.Identity)
	l.Labels = map[string]string{RingLabel: cfg.Ring}
	l.Observer, l.DeleteOnRelease = m.obs, true
	l.Annotations, l.Wake, l.Written = m.annotations, m.wake, m.written
	m.gauges.share = cfg.Metrics.ShardShare.WithLabelValues(cfg.Ring)
	m.gauges.members = cfg.Metrics.ShardMembers.WithLabelValues(cfg.Ring)
	m.gauges.objects = cfg.Metrics.ShardObjects.WithLabelValues(cfg.Ring, cfg.Identity)
	return m
}

// Poke wakes the ring's loop: a Lease, a namespace or an unlabeled
// object changed.
func (m *Member) Poke() {
	m.pokes.Add(1)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// share is a controller's share of a type.
type share struct {
	m       *Member
	t       act.Type
	count   func() int
	labeler act.Labeler // in label mode, once started
	// misplaced holds, by namespace/name, the objects the cache holds
	// whose shard label is not their UID's bucket (or namespace): a
	// replica that holds one by its label puts its label back. Guarded by
	// m.mu.
	misplaced map[string]metav1.Object
}

// Share returns the share of the objects of t: for a controller's own
// type, this replica's part of the space; for a related type, all of it
// but where the server selects by namespace.
func (m *Member) Share(t act.Type) (act.Share, error) {
	if !t.Namespaced && m.cfg.ByNamespace {
		if !t.Related {
			return nil, fmt.Errorf("Sharding.ByNamespace: %s is cluster-scoped", t.Name)
		}
		return nil, nil // not split: all of it on every replica
	}
	s := &share{m: m, t: t}
	if !t.Related {
		m.mu.Lock()
		m.shares = append(m.shares, s)
		m.mu.Unlock()
	}
	return s, nil
}

func (s *share) filters() bool {
	return !s.t.Related || s.m.modeIs(ModeServer) && s.m.cfg.ByNamespace
}

func (s *share) View() *act.View {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.t.Related {
		return s.m.related
	}
	return s.m.primary
}

func (s *share) Serves(obj metav1.Object) bool {
	if !s.filters() {
		return true
	}
	p, ok := s.m.point(obj, s.t.Related)
	if !ok {
		return false
	}
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	serves := m.serving.Contains(p)
	if serves && !s.t.Related && m.modeIs(ModeLabels) {
		if v, _ := m.labelFor(obj); obj.GetLabels()[m.label] != v {
			if s.misplaced == nil {
				s.misplaced = map[string]metav1.Object{}
			}
			s.misplaced[obj.GetNamespace()+"/"+obj.GetName()] = obj
			m.Poke()
		}
	}
	return serves
}

func (s *share) HoldsAll(ns string) bool {
	if !s.filters() {
		return true
	}
	if ns == "" || !s.m.cfg.ByNamespace || !s.m.modeIs(ModeServer) {
		return false // split by UID or by label: no namespace is whole
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.m.serving.Contains(Hash(ns))
}

// Admit judges obj by its UID (or namespace), never by its shard label:
// a label changed to another valid bucket while obj is reconciled here
// moves obj to another replica's cache at once, and that replica must not
// reconcile it too. The label only steers caches, and is put back
// (misplaced).
func (s *share) Admit(ctx context.Context, obj metav1.Object) (context.Context, func(), bool) {
	return s.m.enter(ctx, s.m.home(obj))
}

func (s *share) Objects(count func() int) {
	s.m.mu.Lock()
	s.count = count
	s.m.mu.Unlock()
}

func (s *share) Release() {
	m := s.m
	m.mu.Lock()
	m.shares = slices.DeleteFunc(m.shares, func(x *share) bool { return x == s })
	l := s.labeler
	s.labeler = nil
	m.mu.Unlock()
	if l != nil {
		l.Release()
	}
	m.Poke()
}

// home returns where obj belongs in the hash space: the hash of its UID,
// or of its namespace.
func (m *Member) home(obj metav1.Object) uint64 {
	if m.cfg.ByNamespace {
		return Hash(obj.GetNamespace())
	}
	return Hash(string(obj.GetUID()))
}

// point returns where obj is in the hash space, as a cache's selection
// places it: its home where the server selects (and for related caches),
// by the shard label in label mode. An object without a valid label is
// nowhere.
func (m *Member) point(obj metav1.Object, related bool) (uint64, bool) {
	if m.modeIs(ModeServer) || related {
		return m.home(obj), true
	}
	v, ok := obj.GetLabels()[m.label]
	if !ok {
		return 0, false
	}
	if m.cfg.ByNamespace {
		return Hash(v), true
	}
	b, err := strconv.Atoi(v)
	if err != nil || b < 0 || b >= Buckets || strconv.Itoa(b) != v {
		return 0, false
	}
	return BucketSpan(b).First, true
}

// enter admits a reconcile at point p if this replica serves p.
func (m *Member) enter(ctx context.Context, p uint64) (context.Context, func(), bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.serving.Contains(p) {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(ctx)
	e := &entry{point: p, cancel: cancel}
	m.inflight[e] = true
	return ctx, func() {
		m.mu.Lock()
		delete(m.inflight, e)
		m.mu.Unlock()
		cancel(nil)
		select {
		case m.left <- struct{}{}:
		default:
		}
	}, true
}

// serve makes this replica serve exactly set. What it no longer serves is
// let go at once: its running reconciles are canceled, and serve returns
// once they have all returned, or ctx is done.
func (m *Member) serve(ctx context.Context, set Set) error {
	names := m.labelNamespaces()
	m.mu.Lock()
	released, taken := m.serving.Minus(set), set.Minus(m.serving)
	m.serving = set
	m.setViewsLocked(names)
	if !released.Empty() {
		m.cfg.Metrics.ShardHandovers.WithLabelValues(m.cfg.Ring, "released").Inc()
	}
	if !taken.Empty() {
		m.cfg.Metrics.ShardHandovers.WithLabelValues(m.cfg.Ring, "taken").Inc()
	}
	for e := range m.inflight {
		if released.Contains(e.point) {
			e.cancel(act.ErrMoved)
		}
	}
	m.mu.Unlock()
	for {
		m.mu.Lock()
		running := 0
		for e := range m.inflight {
			if released.Contains(e.point) {
				running++
			}
		}
		m.mu.Unlock()
		if running == 0 {
			return nil
		}
		select {
		case <-m.left:
		case <-ctx.Done():
			return fmt.Errorf("ctrl: %d reconciles of objects moving to other replicas still run: %w", running, context.Cause(ctx))
		}
	}
}

// setViewsLocked replaces the views if what they select changed, which
// restarts the watches of the caches that select on them; names are
// labelNamespaces'. Called with m.mu held.
func (m *Member) setViewsLocked(names []string) {
	known := m.modeNow() != ""
	primary := &act.View{Ready: known}
	related := &act.View{Ready: known}
	switch {
	case !known:
	case m.modeIs(ModeServer):
		if m.serving.Empty() {
			primary.None = true
		} else {
			primary.ShardSelector = m.serving.Selector(m.field)
		}
		if m.cfg.ByNamespace {
			related = primary
		}
	default:
		var values []string
		if m.cfg.ByNamespace {
			for _, ns := range names {
				if m.serving.Contains(Hash(ns)) {
					values = append(values, ns)
				}
			}
			slices.Sort(values)
		} else {
			for b := range Buckets {
				if m.serving.Covers(BucketSpan(b)) {
					values = append(values, strconv.Itoa(b))
				}
			}
		}
		if req, err := labels.NewRequirement(m.label, labelop.In, values); err == nil && len(values) > 0 {
			primary.Label = req
		} else {
			primary.None = true // a namespace is always a valid label value
		}
	}
	if primary.Same(m.primary) && related.Same(m.related) {
		return
	}
	close(m.changed)
	m.changed = make(chan struct{})
	primary.Changed, related.Changed = m.changed, m.changed
	m.primary, m.related = primary, related
}

// labelNamespaces returns the namespaces to select by label, in label mode
// with ByNamespace: all of them, read before taking m.mu.
func (m *Member) labelNamespaces() []string {
	if !m.cfg.ByNamespace || !m.modeIs(ModeLabels) || m.cfg.Namespaces == nil {
		return nil
	}
	return m.cfg.Namespaces()
}

// The claim this replica publishes in its Lease: annotations and written
// are the elector's hooks, publish asks it to write and waits.

func (m *Member) annotations() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	mode := m.modeNow() + " by uid"
	if m.cfg.ByNamespace {
		mode = m.modeNow() + " by namespace"
	}
	return map[string]string{HeldAnnotation: m.held.String(),
		GenerationAnnotation: strconv.FormatUint(m.gen, 10), ModeAnnotation: mode}
}

func (m *Member) written(l *coordinationv1.Lease) {
	gen, err := strconv.ParseUint(l.Annotations[GenerationAnnotation], 10, 64)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen > m.stored {
		m.stored = gen
		close(m.storedCh)
		m.storedCh = make(chan struct{})
	}
}

// publish makes this replica's Lease claim held, and returns once the API
// server stored it.
func (m *Member) publish(ctx context.Context, held Set) error {
	m.mu.Lock()
	m.held = held
	m.gen++
	gen := m.gen
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	for {
		m.mu.Lock()
		stored, ch := m.stored, m.storedCh
		m.mu.Unlock()
		if stored >= gen {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ctrl: publishing the claim of ring %s: %w", m.cfg.Ring, context.Cause(ctx))
		}
	}
}

// Run decides the ring's mode, then holds this replica's membership and
// runs lead while it lasts, with the ring's loop beside it.
func (m *Member) Run(ctx context.Context, lead func(context.Context) error) error {
	log := m.cfg.Lease.Log
	if !m.detect(ctx) {
		return nil
	}
	if err := m.cfg.Synced(ctx); err != nil {
		return nil // ctx is done
	}
	log.Info("joining the ring", "mode", m.mode, "by", strings.TrimPrefix(m.field, "object.metadata."))
	m.cfg.Metrics.ShardMode.WithLabelValues(m.cfg.Ring, m.mode).Set(1)
	var leadErr error
	err := leader.Run(ctx, m.cfg.Lease, func(memberCtx context.Context, _ *leader.Term) {
		loopCtx, stop := context.WithCancel(memberCtx)
		var wg sync.WaitGroup
		wg.Go(func() { m.loop(loopCtx) })
		leadErr = lead(memberCtx)
		stop()
		wg.Wait()
	})
	if err != nil {
		return errors.Join(fmt.Errorf("ctrl: membership of ring %s: %w", m.cfg.Ring, err), leadErr)
	}
	return leadErr
}

// detect decides the ring's mode: server-side selection if the API server
// applies a shard selector to a list of every sharded type it serves (or,
// if it serves none of them yet, of the ring's Leases), labels otherwise.
// It retries what it cannot tell, and reports false if ctx ended first.
func (m *Member) detect(ctx context.Context) bool {
	mode := ModeServer
	if m.cfg.ByLabel {
		mode = ModeLabels
	}
	m.mu.Lock()
	var probes []func(context.Context, string) (bool, error)
	for _, s := range m.shares {
		if s.t.Probe != nil && mode == ModeServer {
			probes = append(probes, s.t.Probe)
		}
	}
	m.mu.Unlock()
	told := false
	if mode == ModeServer {
		probes = append(probes, m.cfg.Probe) // tells only if no other did
	}
	sel := All.Selector(m.field)
	for i, probe := range probes {
		if told && i == len(probes)-1 {
			break
		}
		for {
			applied, err := probe(ctx, sel)
			if err == nil {
				told = true
				if !applied {
					mode = ModeLabels
				}
				break
			}
			if apierrors.IsNotFound(err) {
				break // not served (an optional kind without its CRD): another tells
			}
			if ctx.Err() != nil {
				return false
			}
			m.cfg.Lease.Log.Info("cannot tell whether the API server selects by hash; retrying", "err", err.Error())
			select {
			case <-ctx.Done():
				return false
			case <-time.After(time.Second):
			}
		}
		if mode == ModeLabels {
			break
		}
	}
	names := []string(nil)
	if m.cfg.ByNamespace && mode == ModeLabels && m.cfg.Namespaces != nil {
		names = m.cfg.Namespaces()
	}
	m.mu.Lock()
	m.mode = mode
	close(m.moded)
	m.setViewsLocked(names)
	m.mu.Unlock()
	return true
}

// modeNow returns the ring's mode, or "" while it is not known.
func (m *Member) modeNow() string {
	select {
	case <-m.moded:
		return m.mode
	default:
		return ""
	}
}

func (m *Member) modeIs(mode string) bool { return m.modeNow() == mode }

// Busy says why the ring is not settled: a replica that is moving towards
// its share, or labeling, is not idle.
func (m *Member) Busy() string {
	if m.modeNow() == "" {
		return fmt.Sprintf("ring %s: detecting whether the API server selects by hash", m.cfg.Ring)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.settled:
		return fmt.Sprintf("ring %s: taking its share", m.cfg.Ring)
	case m.pokes.Load() != m.looked:
		return fmt.Sprintf("ring %s: looking at a change", m.cfg.Ring)
	}
	return ""
}

// State is the ring's line in /readyz.
func (m *Member) State() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	mode := m.modeNow()
	if mode == "" {
		mode = "not yet known"
	}
	units := "64 buckets of the hash space"
	if m.cfg.ByNamespace {
		units = "namespaces"
	}
	return fmt.Sprintf("ring %s: mode %s, serving %.3f of the %s among %d members",
		m.cfg.Ring, mode, m.fraction, units, m.members)
}

// loop moves this replica towards its share while it is a member: on
// every change of the ring's Leases, namespaces or unlabeled objects, and
// every RetryPeriod, which is how members whose Leases expired are found.
func (m *Member) loop(ctx context.Context) {
	log := m.cfg.Lease.Log
	units := BucketUnits
	if m.cfg.ByNamespace {
		units = func() []Span { return PointUnits(m.cfg.Namespaces()) }
	}
	r := &Ring{Identity: m.cfg.Identity, Lease: m.cfg.Lease.Name, Observer: m.obs, Log: log,
		Units: units, Leases: m.cfg.Cached, Fenced: m.cfg.Fenced, Publish: m.publish, Serve: m.serve}
	retry := m.cfg.Lease.RetryPeriod
	tick := time.NewTicker(retry)
	defer tick.Stop()
	defer func() {
		m.gauges.share.Set(0)
		m.gauges.members.Set(0)
		m.cfg.Metrics.ShardObjects.DeletePartialMatch(prometheus.Labels{"ring": m.cfg.Ring})
	}()
	var last Set
	for {
		began := m.pokes.Load() // the changes this round looks at
		if names := m.labelNamespaces(); names != nil {
			m.mu.Lock()
			m.setViewsLocked(names) // namespaces may have come or gone
			m.mu.Unlock()
		}
		settled, live, err := r.Step(ctx)
		if err != nil && ctx.Err() == nil {
			log.V(1).Info("the ring's step failed; trying again", "err", err.Error())
		}
		if m.modeIs(ModeLabels) && m.labelUnlabeled(ctx) > 0 {
			settled = false
		}
		m.forgetExpired(ctx)
		m.mu.Lock()
		m.settled, m.members, m.looked = settled && err == nil, len(live), began
		m.fraction = UnitsServed(r.Units(), r.Serving())
		var counts []func() int
		for _, s := range m.shares {
			if s.count != nil {
				counts = append(counts, s.count)
			}
		}
		m.mu.Unlock()
		n := 0 // counted outside m.mu: a cache takes its lock before m.mu
		for _, count := range counts {
			n += count()
		}
		if serving := r.Serving(); !serving.Equal(last) {
			log.Info("serving", "share", fmt.Sprintf("%.3f", serving.Fraction()), "members", live)
			last = serving
		}
		m.gauges.share.Set(m.fraction)
		m.gauges.members.Set(float64(len(live)))
		m.gauges.objects.Set(float64(n))
		m.cfg.Round()
		// Wake when the next live member's Lease expires, not a retry
		// period later: a dead member's share moves that much sooner.
		next := retry
		for _, l := range m.cfg.Cached() {
			if d := m.obs.Remaining(l); l.Name != m.cfg.Lease.Name && d > 0 {
				next = min(next, d+time.Millisecond)
			}
		}
		tick.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-m.kick:
		}
	}
}

// forgetExpired deletes the Leases of members gone for long: ten lease
// durations past their expiry. The delete is conditional on the version
// judged, so a member that came back keeps its Lease.
func (m *Member) forgetExpired(ctx context.Context) {
	all := m.cfg.Cached()
	m.obs.Forget(func(name string) bool {
		return slices.ContainsFunc(all, func(l *coordinationv1.Lease) bool { return l.Name == name })
	})
	for _, l := range all {
		if l.Name == m.cfg.Lease.Name || m.obs.ExpiredFor(l) < 10*m.cfg.Lease.LeaseDuration {
			continue
		}
		if err := m.cfg.Lease.Leases.Delete(ctx, l.Name, l.ResourceVersion); err == nil {
			m.cfg.Lease.Log.Info("deleted the Lease of a member gone for long", "lease", l.Namespace+"/"+l.Name)
		}
	}
}

// labelUnlabeled starts the labelers of the shares that have none, then gives the
// objects this replica serves that carry no shard label yet their label.
// It returns how many it wrote.
func (m *Member) labelUnlabeled(ctx context.Context) int {
	var unlabeled *labels.Requirement
	var err error
	if m.cfg.ByNamespace {
		unlabeled, err = labels.NewRequirement(m.label, labelop.DoesNotExist, nil)
	} else {
		buckets := make([]string, Buckets)
		for b := range buckets {
			buckets[b] = strconv.Itoa(b)
		}
		unlabeled, err = labels.NewRequirement(m.label, labelop.NotIn, buckets)
	}
	if err != nil {
		return 0
	}
	m.mu.Lock()
	shares := slices.Clone(m.shares)
	m.mu.Unlock()
	var labelers []act.Labeler
	for _, s := range shares {
		m.mu.Lock()
		l := s.labeler
		m.mu.Unlock()
		if l == nil && s.t.Unlabeled != nil {
			if l, err = s.t.Unlabeled(*unlabeled, m.Poke); err != nil {
				m.cfg.Lease.Log.Error(err, "cannot watch unlabeled objects; trying again", "type", s.t.Name)
				continue
			}
			m.mu.Lock()
			if slices.Contains(m.shares, s) {
				s.labeler = l
			} else {
				defer l.Release() // released meanwhile
			}
			m.mu.Unlock()
		}
		if l != nil {
			labelers = append(labelers, l)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	n := 0
	seen := map[string]bool{}
	for _, l := range labelers {
		for _, o := range l.List() {
			v, p := m.labelFor(o)
			key := o.GetNamespace() + "/" + o.GetName()
			seen[key] = true
			m.mu.Lock()
			rv, tried := m.labeled[key]
			mine := m.serving.Contains(p) && (!tried || rv != o.GetResourceVersion())
			if mine {
				m.labeled[key] = o.GetResourceVersion() // not again until the object changes
			}
			m.mu.Unlock()
			if !mine {
				continue
			}
			n++
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := l.Patch(ctx, o, LabelPatch(o.GetResourceVersion(), m.label, v))
				switch {
				case err == nil:
					m.cfg.Metrics.ShardLabels.WithLabelValues(m.cfg.Ring).Inc()
				case ctx.Err() == nil && !apierrors.IsNotFound(err):
					m.cfg.Lease.Log.V(1).Info("cannot label an object for its shard; trying again", "object", key, "err", err.Error())
					m.mu.Lock()
					delete(m.labeled, key)
					m.mu.Unlock()
				}
			})
		}
	}
	// Put back the labels of the misplaced objects: conditional on the
	// version seen, so an object changed or gone meanwhile is left alone
	// (its next version is judged again).
	for _, s := range shares {
		m.mu.Lock()
		l, misplaced := s.labeler, s.misplaced
		if l != nil {
			s.misplaced = nil
		}
		m.mu.Unlock()
		if l == nil {
			continue
		}
		for key, o := range misplaced {
			v, _ := m.labelFor(o)
			n++
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := l.Patch(ctx, o, LabelPatch(o.GetResourceVersion(), m.label, v))
				switch {
				case err == nil:
					m.cfg.Metrics.ShardLabels.WithLabelValues(m.cfg.Ring).Inc()
					m.cfg.Lease.Log.Info("put back the shard label of an object: it was changed, and objects are placed by "+
						strings.TrimPrefix(m.field, "object.metadata."), "object", key, "label", o.GetLabels()[m.label], "restored", v)
				case ctx.Err() == nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
					m.cfg.Lease.Log.V(1).Info("cannot put back the shard label of an object; trying again", "object", key, "err", err.Error())
					m.mu.Lock()
					if _, newer := s.misplaced[key]; !newer && slices.Contains(m.shares, s) {
						if s.misplaced == nil {
							s.misplaced = map[string]metav1.Object{}
						}
						s.misplaced[key] = o
					}
					m.mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Forget the objects that left the labelers' watches: labeled, or gone.
	m.mu.Lock()
	for key := range m.labeled {
		if !seen[key] {
			delete(m.labeled, key)
		}
	}
	m.mu.Unlock()
	return n
}

// labelFor returns the shard label an object should carry, and the point
// it places the object at.
func (m *Member) labelFor(obj metav1.Object) (string, uint64) {
	if m.cfg.ByNamespace {
		return obj.GetNamespace(), Hash(obj.GetNamespace())
	}
	b := BucketOf(Hash(string(obj.GetUID())))
	return strconv.Itoa(b), BucketSpan(b).First
}

// Identity returns this replica's identity in the ring.
func (m *Member) Identity() string { return m.cfg.Identity }
