package ctrl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/metrics"
	"github.com/typedctrl/ctrl/internal/probe"
	"github.com/typedctrl/ctrl/internal/shared"
	"github.com/typedctrl/ctrl/internal/watcher"
	"github.com/typedctrl/ctrl/internal/workq"
)

// Result tells a controller what to do after a successful reconcile. The
// zero value means done: the object is reconciled again only when it, or
// something mapped to it, changes.
type Result struct {
	// RequeueAfter, if positive, reconciles the object again after this
	// long, unless a change reconciles it sooner.
	RequeueAfter time.Duration
}

// A Request is the reconcile a context belongs to, as [RequestFrom] returns
// it. Writes under that context are fenced: see [CheckLeadership].
type Request struct {
	// Key is the reconciled object's; bind clients to its Cluster with
	// [Client.InCluster].
	Key Key
	// Causes are why the key was queued.
	Causes Causes
	// Identity is the replica's ([Manager.Identity]): "" without leader
	// election and sharding.
	Identity string
}

// RequestFrom returns the reconcile whose context ctx is, or is derived
// from; outside a reconcile, the zero Request.
func RequestFrom(ctx context.Context) Request {
	ri, ok := ctx.Value(requestKey{}).(*reconcileInfo)
	if !ok {
		return Request{}
	}
	return Request{Key: ri.key, Causes: ri.causes, Identity: ri.identity}
}

// reconcileInfo is a reconcile's context: its parent's, with the
// reconcile's logger (under logr's key, as logr.NewContext puts it) and
// itself (under requestKey), in one allocation where context.WithValue
// makes two.
type reconcileInfo struct {
	context.Context
	log      logr.Logger
	key      Key
	causes   Causes // a copy: the queue reuses the record the worker took
	identity string
	// reconciled: reconcile got the object of uid (see vanished).
	reconciled bool
	uid        types.UID
	yield      watcher.Yield // of the watch's reader it runs on, if it does (listwatch.go)
	// requested: when the reconcile first sent a request through the
	// manager's transport, which asks for yield before each (Unix ns).
	requested atomic.Int64
}

type requestKey struct{}

// Value answers requestKey and logr's key; other keys, the parent.
func (ri *reconcileInfo) Value(key any) any {
	switch key {
	case requestKey{}:
		return ri
	case logrKey:
		return ri.log
	case watcher.YieldKey{}:
		if ri.requested.Load() == 0 {
			ri.requested.CompareAndSwap(0, time.Now().UnixNano())
		}
		return ri.yield
	}
	return ri.Context.Value(key)
}

// logrKey is the key logr keeps a context's logger under, learned by
// asking a context that records the key it is asked for.
var logrKey = func() any {
	var k keyRecorder
	logr.FromContextOrDiscard(&k)
	return k.key
}()

type keyRecorder struct {
	context.Context
	key any
}

func (k *keyRecorder) Value(key any) any { k.key = key; return nil }

// ControllerOptions configure a [Controller]. The zero value is one worker,
// [DefaultRateLimiter], and the default cache of the type.
type ControllerOptions struct {
	// Workers is how many objects are reconciled at once. Default: 1. One
	// cluster of a fleet takes at most Workers - max(1, Workers/4) of them,
	// so a slow member never holds up the others. A controller whose
	// workers all wait, and whose reconciles are short, reconciles the
	// next watch event's key on the goroutine that read it, in one of
	// these places (README: Reconciles on the watch's reader).
	Workers int
	// RateLimiter spaces out retries after errors; see [DefaultRateLimiter].
	// Default: DefaultRateLimiter().
	RateLimiter RateLimiter
	// Cache selects the objects the controller reconciles. Default: every
	// object of the type in the manager's namespace.
	Cache CacheOptions
	// ResyncPeriod, if positive, reconciles every cached object again at
	// this interval (Live first). Default: never.
	ResyncPeriod time.Duration
	// CopyObject hands reconcile, OnDelete and finalize a deep copy of the
	// cached object, theirs to change, as controller-runtime does. Default:
	// off, they read the cache's object itself (Fresh, Shared).
	CopyObject bool
	// ReconcileTimeout, if positive, cancels each reconcile's context (with
	// its finalize and OnDelete hooks) this long after it began; overruns
	// count in ctrl_reconcile_timeouts_total, and the worker still waits
	// for a function that ignores its context. Default: no timeout.
	ReconcileTimeout time.Duration
	// RequeueJitter delays each Result.RequeueAfter by a random part of up
	// to this fraction of it (0.1: up to 10% later, never sooner), so that
	// objects reconciled together do not come back together. Between 0 and
	// 1. Default: 0, no jitter.
	RequeueJitter float64
	// Unsharded makes every replica reconcile every object of the
	// controller even when Options.Sharding names a ring. Default: sharded
	// when it does.
	Unsharded bool
}

// Controller reconciles objects of type T: whenever an object changes, or
// an object mapped to it does, its key is queued and a worker calls the
// reconcile function with the latest cached state. Create it with
// [NewController] and wire it with [Owns], [Watches] and its methods
// (see the package's guarantees: Stingy, Live first, Fresh, Persistent,
// One leader, One owner per object, Rewirable).
type Controller[T Object] struct {
	mgr       *Manager
	ctrlName  string
	reconcile func(context.Context, T) (Result, error)
	opts      ControllerOptions
	cache     *Cache[T]
	client    *Client[T]
	q         *queue
	log       logr.Logger
	metrics   metrics.Controller

	mu         sync.Mutex
	wired      bool // Start froze the wiring
	updatePass []func(old, obj T) bool
	finalizer  string
	finalize   func(context.Context, T) error
	onDelete   func(context.Context, T) error
	tombstones map[Key]tombstone[T] // removed objects not yet handled
	// awaiting: keys waiting for this program's write to be cached, with causes.
	awaiting  map[Key]*Causes
	nAwaiting atomic.Int32
	// finalized: finalize succeeded, the finalizer's removal not yet seen.
	finalized map[Key]types.UID

	// active: the workers run (this replica leads); else handlers drop all.
	active   atomic.Bool
	stopping atomic.Bool
	// reconcileCtx is the reconciles' context, for one term of leadership.
	reconcileCtx atomic.Pointer[context.Context]
	startOnce    sync.Once     // starts the workers
	stop         chan struct{} // closed by the first shutdown
	stopOnce     sync.Once
	wg           sync.WaitGroup
	outage       probe.Summary
	failures     workq.Failures[Key] // keys whose last reconcile failed, with its error
	// afterRead, set by tests before Start, runs right after a cache read.
	afterRead func(Key, T)
	// copying: reconciles get copies (CopyObject, or a change was found);
	// checks picks the reconciles whose shared object is checked.
	copying atomic.Bool
	checks  shared.Sampler
	pace    watcher.Pace          // whether a key may be reconciled on a watch's reader
	misused atomic.Pointer[error] // the first change a test binary found

	// links and cancel are under mu; wiring serializes changes to the links.
	wiring  sync.Mutex
	links   []*link
	removed atomic.Bool
	cancel  context.CancelFunc
}

// NewController returns a controller named name that calls reconcile for
// objects of type T; T is inferred from reconcile. The name labels logs and
// metrics and must be unique in the manager. It returns an error if T is
// not a known, watchable resource, if reconcile is nil, if the name is empty
// or taken, or if the manager has started.
//
// If reconcile returns an error, the key is retried with backoff and the
// Result is ignored; a gone object is not passed to reconcile (see
// [Controller.OnDelete]). A NotFound from writing (not creating) the
// reconciled object, once the server confirms it gone, counts as a
// success, logged at V(1): see the package's guarantees, Fresh.
func NewController[T Object](m *Manager, name string, reconcile func(context.Context, T) (Result, error), opts ControllerOptions) (*Controller[T], error) {
	if name == "" {
		return nil, errors.New("ctrl: NewController: empty name")
	}
	if reconcile == nil {
		return nil, fmt.Errorf("ctrl: NewController %q: nil reconcile function", name)
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = DefaultRateLimiter()
	}
	if j := opts.RequeueJitter; !(j >= 0 && j <= 1) { // NaN too
		return nil, fmt.Errorf("ctrl: NewController %q: RequeueJitter %v: want a fraction between 0 and 1", name, j)
	}
	u := use[T]{share: ownShare}
	if opts.Unsharded {
		u.share = noShare
	}
	cache, err := makeCache(m, opts.Cache, u)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewController %q: %w", name, err)
	}
	c := &Controller[T]{
		mgr:       m,
		ctrlName:  name,
		reconcile: reconcile,
		opts:      opts,
		cache:     cache,
		client:    &Client[T]{m: m, b: cache.b},
		log:       m.log.WithValues("controller", name),
	}
	m.mu.Lock()
	switch {
	case m.started:
		err = fmt.Errorf("ctrl: NewController %q: %w", name, ErrStarted)
	case m.controllers[name] != nil:
		err = fmt.Errorf("ctrl: NewController %q: a controller with this name already exists", name)
	default:
		if err = cache.addHandler(c); err != nil {
			err = fmt.Errorf("ctrl: NewController %q: %w", name, err)
		}
	}
	if err != nil {
		m.mu.Unlock()
		m.unuse(cache)
		return nil, err
	}
	defer m.mu.Unlock()
	names := make([]string, len(reasons))
	for i, r := range reasons {
		names[i] = string(r)
	}
	c.metrics = m.metrics.Controller(name, opts.Workers, names)
	c.copying.Store(opts.CopyObject)
	c.checks.First, c.checks.Every = 100, 64
	m.controllers[name] = c
	m.ctrlList = append(m.ctrlList, c)
	return c, nil
}

// Cache returns the cache of the objects the controller reconciles.
func (c *Controller[T]) Cache() *Cache[T] { return c.cache }

// Name returns the controller's name.
func (c *Controller[T]) Name() string { return c.ctrlName }

// String returns "controller <name>".
func (c *Controller[T]) String() string { return fmt.Sprintf("controller %q", c.ctrlName) }

// FilterUpdates makes the controller reconcile an update only if one of
// changed reports true, such as [GenerationChanged]; other events, and
// updates of objects being deleted, always pass. Several calls add to the
// list. It returns an error after the manager started.
func (c *Controller[T]) FilterUpdates(changed ...func(old, obj T) bool) error {
	if err := checkFilters(changed); err != nil {
		return fmt.Errorf("ctrl: %s: FilterUpdates: %w", c, err)
	}
	return c.wire("FilterUpdates", func() error {
		c.updatePass = append(c.updatePass, changed...)
		return nil
	})
}

// OnFinalize makes the controller own the finalizer name (a qualified name
// such as "example.com/cleanup") on its objects: it adds the finalizer
// before reconciling an object, and when the object is being deleted, or
// leaves the cache's selector, it calls finalize instead of reconcile and
// removes the finalizer once finalize returns nil. An error from finalize
// is retried with backoff. See the package's guarantees: Observable.
//
// finalize runs once while the process lives (a failed removal is retried
// without it) but again after a restart or failover that came between its
// success and the removal: it must be idempotent. It returns an error for
// an invalid name, a second call, or after the manager started.
func (c *Controller[T]) OnFinalize(name string, finalize func(ctx context.Context, obj T) error) error {
	if errs := validation.ValidateFinalizerName(name, nil); len(errs) > 0 || !strings.Contains(name, "/") || finalize == nil {
		return fmt.Errorf("ctrl: %s: OnFinalize %q: want a qualified name like example.com/cleanup and a function", c, name)
	}
	return c.wire("OnFinalize", func() error {
		if c.finalizer != "" {
			return fmt.Errorf("ctrl: %s: OnFinalize %q: the controller already owns finalizer %q", c, name, c.finalizer)
		}
		// Finalizers are patched; a removal the cache cannot tell is read.
		c.mgr.grants.Need(c.cache.b.GVR.GroupResource(), "patch", "get")
		c.finalizer, c.finalize = name, finalize
		c.tombstones = map[Key]tombstone[T]{}
		return nil
	})
}

// OnDelete sets a function that receives the last known state of each
// object once it is gone from the API server, at most once per deletion
// this replica sees while it leads (see the package's guarantees:
// Observable); use [Controller.OnFinalize] when cleanup must happen. An
// error is retried with backoff, with the same object; a new object of the
// same key is reconciled after fn got the old one. It returns an error
// after the manager started.
func (c *Controller[T]) OnDelete(fn func(ctx context.Context, obj T) error) error {
	if fn == nil {
		return fmt.Errorf("ctrl: %s: OnDelete: nil function", c)
	}
	return c.wire("OnDelete", func() error {
		c.onDelete = fn
		c.tombstones = map[Key]tombstone[T]{}
		return nil
	})
}

// Enqueue queues keys for reconciling, as if their objects had changed,
// with cause TriggerEnqueued: for triggers from outside the cluster. It is
// safe for concurrent use, and [Manager.WaitIdle] counts the keys. Before
// the controller runs (before Start, or while another replica leads) it
// does nothing: the controller reconciles every object when it starts.
func (c *Controller[T]) Enqueue(keys ...Key) {
	if !c.active.Load() {
		return
	}
	for _, k := range keys {
		c.q.Add(k, Cause{Trigger: TriggerEnqueued})
	}
	c.mgr.activity.Add(1)
}

func (c *Controller[T]) wire(what string, fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wired {
		return fmt.Errorf("ctrl: %s: %s: %w", c, what, ErrStarted)
	}
	return fn()
}
