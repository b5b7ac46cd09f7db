package ctrl

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/objects"
	"github.com/typedctrl/ctrl/internal/scope"
	"github.com/typedctrl/ctrl/internal/shared"
)

// CacheOptions select what a [Cache] holds. The zero value caches every
// object of the type in the manager's namespace, with managedFields removed.
// Caches with equal options for the same type are one cache.
type CacheOptions struct {
	// Namespaces restricts the cache to these namespaces, with one watch
	// each behind one view. Ignored for cluster-scoped types. Default: the
	// manager's Options.Namespace, or all namespaces.
	Namespaces []string
	// LabelSelector restricts the cache to matching objects; an object whose
	// labels stop matching leaves it ([Controller.OnDelete]). Default: all.
	LabelSelector labels.Selector
	// FieldSelector restricts the cache to objects whose fields match, as the
	// server supports them, such as spec.nodeName. Default: all.
	FieldSelector fields.Selector
	// KeepManagedFields keeps metadata.managedFields in cached objects.
	// Default: they are removed as objects arrive.
	KeepManagedFields bool
	// Resource names the resource a cache of *unstructured.Unstructured or
	// *metav1.PartialObjectMetadata holds. It must be zero for other types.
	Resource APIResource
	// Fleet makes the cache hold the objects of every engaged member cluster
	// ([Provider]) instead of the own cluster's, each keyed with its member;
	// a member that cannot be reached holds up no other, nor Start. Default: off.
	Fleet bool
	// Sharded makes a cache a sharded controller [Watches] hold only the
	// namespaces this replica serves with Sharding.ByNamespace ([Owns] does
	// so itself); otherwise it holds every object. Default: every namespace.
	Sharded bool

	// Optional lets the cache's kind, a custom resource, be absent (see the
	// package's guarantees: Optional): Start does not wait for it; the cache
	// watches the CRD (get, list, watch on customresourcedefinitions), with
	// /readyz and ctrl_cache_waiting_for_crd naming it while it waits. Not for
	// fleet caches nor built-in kinds; a kind missing when wired must declare
	// its scope. Default: required, and Start fails if the kind is not served.
	Optional bool
}

// Cache is a typed, read-only, continuously updated view of the objects of
// one type, fed by a list-and-watch (one per namespace). Everything that
// asks for the same type and [CacheOptions] shares one Cache. A cache only
// controllers use stops with its last user (Rewirable); [NewCache]'s stay.
//
// Its reads are shared objects, never to be modified (see "Reading
// objects" in the package doc), and may lag the server (Fresh). All
// methods are safe for concurrent use.
type Cache[T Object] struct {
	mgr  *Manager
	b    *binding.Binding[T] // the own cluster's; a fleet cache's has only Info
	opts CacheOptions
	// scope's namespaces change with SetNamespaces; read them from namespaces.
	scope      scope.Scope
	namespaces atomic.Pointer[[]string]
	share      act.Share // the part of the objects this replica holds; nil: all
	kind       string    // for causes: "ConfigMap"
	synced     chan struct{}
	syncOnce   sync.Once
	opt        *optional // nil for a required kind
	refs       cacheRefs // under mgr.mu
	// typeMeta is stamped on every object stored: typed decoding drops it.
	typeMeta metav1.TypeMeta

	// feeds.go's inputs and the feeds change under rewire; feeds is read without it.
	rewire    sync.Mutex
	running   context.Context // set while the cache runs
	runLog    logr.Logger
	members   map[string]*binding.Binding[T] // a fleet cache's engaged members
	served    types.UID                      // an optional cache's CRD, while it serves the version
	feeds     atomic.Pointer[map[feedKey]*feed[T]]
	refeeding atomic.Bool
	feedRun   sync.WaitGroup

	mu        sync.RWMutex
	items     objects.Store[T]      // with indexes and expectations
	suspects  map[Key]T             // see suspect; under mu
	nSuspects atomic.Int32          // len(suspects)
	misused   atomic.Pointer[error] // a change to a cached object, found in a test binary
	transform func(T) T             // set by run from userTF; read only by the store
	userTF    func(T) T
	onError   func(error)
	handlers  []handler[T]
	started   bool

	// dispatch serializes every feed's changes: handlers see one at a time, in order.
	dispatch    sync.Mutex
	dispatching atomic.Int32
	log         logr.Logger // set by run
}

// handler receives changes in order on the watch's goroutine; it must not block.
type handler[T Object] interface {
	changed(ev event[T])
	// listed receives a complete list's additions and updates at once.
	listed(evs []event[T])
}

type event[T Object] struct {
	kind eventKind
	key  Key
	old  T // for updates
	obj  T // the new state; for removals, the last known state
	// inline, if set, is where one of the cache's controllers may leave
	// the key to reconcile on the reader's goroutine (feed.TakeInline).
	inline *inlineRun
}

type eventKind uint8

const (
	added eventKind = iota
	updated
	deleted  // gone from the API server
	left     // still on the server, but no longer selected by the cache
	vanished // missing from a relist of a selective cache: deleted or left
	// forgotten: out of the cache's reach; no hook runs, the finalizer stays.
	forgotten
	// joined: a member's first list is in (key names the cluster only).
	joined
)

// NewCache returns the manager's cache of T for opts, creating it on first
// use; it starts with the manager, or at once if that runs, and is kept
// while the manager runs. It returns an error if T is not a known resource
// or cannot be watched, if opts name a resource for a typed T, or if the
// cache exists and is required where opts say optional, or the reverse.
func NewCache[T Object](m *Manager, opts CacheOptions) (*Cache[T], error) {
	u := use[T]{pin: true}
	if opts.Sharded {
		u.share = relatedShare
	}
	return makeCache(m, opts, u)
}

// String describes the cache: its type, resource and scope.
func (c *Cache[T]) String() string {
	if s := c.currentScope().String(); s != "" {
		return c.b.Info.String() + " " + s
	}
	return c.b.Info.String()
}

// Get returns the cached object with key, shared: do not modify it.
func (c *Cache[T]) Get(key Key) (T, bool) {
	c.mu.RLock()
	obj, ok := c.items.Get(objects.Key(key))
	c.mu.RUnlock()
	return obj, ok
}

// List returns the cached objects, shared, in namespace ("" for all) that
// match selector (nil for all), in no order; in a fleet cache, every
// member's. Its cost grows with the namespace's objects, not the cache's.
func (c *Cache[T]) List(namespace string, selector labels.Selector) []T {
	if !c.opts.Fleet {
		return c.ListIn("", namespace, selector)
	}
	var out []T
	for _, cluster := range c.mgr.Clusters() {
		out = append(out, c.ListIn(cluster, namespace, selector)...)
	}
	return out
}

// ListIn is [Cache.List] for one cluster: a member's name in a fleet
// cache, "" in an ordinary one.
func (c *Cache[T]) ListIn(cluster, namespace string, selector labels.Selector) []T {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []T
	for _, obj := range c.items.In(cluster, namespace) {
		if selector == nil || selector.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	return out
}

// guard has the store find changes made in place to cached objects, which
// WaitIdle reports: for test binaries.
func (c *Cache[T]) guard() {
	c.items.Guard(func(obj T) T { return obj.DeepCopyObject().(T) }, shared.Diff[T], func(k objects.Key, path string) {
		err := fmt.Errorf("ctrl: the cached %s %s was changed at %s: code that read it, shared, changed it "+
			"(a reconcile, Cache.Get, List or ByIndex, an update filter, a mapping function): change a copy (DeepCopy)", c.b.Type, Key(k), path)
		if c.misused.CompareAndSwap(nil, &err) {
			c.mgr.log.Error(err, "restored the cached object; WaitIdle reports the change")
		}
	})
}

// changes checks the cached objects, if guarded, and returns the first
// change found.
func (c *Cache[T]) changes() error {
	c.mu.Lock()
	c.items.Check()
	c.mu.Unlock()
	if err := c.misused.Load(); err != nil {
		return *err
	}
	return nil
}

func (c *Cache[T]) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.Len()
}

func (c *Cache[T]) keys() []Key {
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := make([]Key, 0, c.items.Len())
	for k := range c.items.All() {
		keys = append(keys, Key(k))
	}
	return keys
}

// SetTransform passes every object through fn, after managedFields are
// removed, before storing it. fn may modify its argument and returns the
// object to store; fn(fn(x)) must equal fn(x). It returns an error once the
// cache started or if a transform is set.
func (c *Cache[T]) SetTransform(fn func(T) T) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case fn == nil:
		return fmt.Errorf("ctrl: transform of %s: nil function", c)
	case c.started:
		return fmt.Errorf("ctrl: transform of %s: %w", c, ErrStarted)
	case c.userTF != nil:
		return fmt.Errorf("ctrl: transform of %s is already set", c)
	}
	c.userTF = fn
	return nil
}

// SetWatchErrorHandler sets fn, called with each failed list or watch
// request's error and each error that ends a watch stream (see the
// package's guarantees: Told), besides the manager's logging; a later call
// replaces it. A 410 Gone only relists (ctrl_cache_relists_total). fn runs
// one call at a time per watch and must not block.
func (c *Cache[T]) SetWatchErrorHandler(fn func(error)) {
	c.mu.Lock()
	c.onError = fn
	c.mu.Unlock()
}

// HasSynced reports whether the cache completed its first list or, for an
// optional kind, found its CRD missing: in step with the server either way.
func (c *Cache[T]) HasSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until the cache has synced ([Cache.HasSynced]), or ctx
// is done. Before the manager starts, it waits for the start.
func (c *Cache[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-c.synced:
		return nil
	case <-ctx.Done():
		err := fmt.Errorf("ctrl: %s did not sync: %w", c, context.Cause(ctx))
		if last := c.lastError(); last != nil {
			err = fmt.Errorf("%w; last watch error: %w", err, last)
		}
		return err
	}
}

// addHandler registers h while wiring; see addLiveHandler for later.
func (c *Cache[T]) addHandler(h handler[T]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	c.handlers = append(c.handlers, h)
	return nil
}

// describe and the other unexported methods implement managedCache.
func (c *Cache[T]) describe() string { return c.String() }

func (c *Cache[T]) lastError() error {
	if c.opt != nil {
		return c.opt.lastError() // its CRD's watch: the cache's own feeds may wait
	}
	for _, f := range c.ownFeeds() {
		if e := f.lastErr.Load(); e != nil {
			return *e
		}
	}
	return nil
}

func (c *Cache[T]) syncedChan() <-chan struct{} { return c.synced }

// forbidden returns why the own cluster refuses the cache a list or watch, or nil.
func (c *Cache[T]) forbidden() error {
	for _, f := range c.ownFeeds() {
		if err := f.denied.Forbidden(); err != nil {
			return err
		}
	}
	return nil
}

// notReady says why the cache is not ready (unsynced, or forbidden to watch), or "".
func (c *Cache[T]) notReady() string {
	if !c.HasSynced() {
		if err := c.forbidden(); err != nil {
			return err.Error()
		}
		if last := c.lastError(); last != nil {
			return "not synced: " + last.Error()
		}
		return "not synced yet"
	}
	for _, f := range c.ownFeeds() {
		if err := f.denied.ForbiddenTo("watch"); err != nil {
			return err.Error()
		}
	}
	if c.opt == nil && !c.Served() {
		return fmt.Sprintf("not served: %v", c.lastError()) // its CRD was deleted
	}
	return ""
}

// warning says what the server refuses a ready cache (a list it watched around), or "".
func (c *Cache[T]) warning() string {
	if c.notReady() != "" {
		return ""
	}
	if err := c.forbidden(); err != nil {
		return err.Error()
	}
	return ""
}

func (c *Cache[T]) notFound(key Key) error {
	return apierrors.NewNotFound(c.b.GVR.GroupResource(), key.Name)
}

// selective: objects may leave the cache while they exist (a selector, a share label).
func (c *Cache[T]) selective() bool {
	return c.scope.Selective() || c.share != nil && c.share.View().Label != nil
}

func (c *Cache[T]) currentScope() scope.Scope {
	sc := c.scope
	if ns := c.namespaces.Load(); ns != nil {
		sc.Namespaces = *ns
	}
	return sc
}

// covers: no selector, key's namespace watched, key's cluster the cache's.
func (c *Cache[T]) covers(key Key) bool {
	return c.coversNamespace(key.Cluster, key.Namespace)
}

func (c *Cache[T]) coversNamespace(cluster, ns string) bool {
	return c.coversCluster(cluster) && c.currentScope().Holds(ns) &&
		(c.share == nil || c.share.HoldsAll(ns))
}

// coversCluster: own cluster for an ordinary cache, an engaged member for a fleet's.
func (c *Cache[T]) coversCluster(cluster string) bool {
	if !c.opts.Fleet {
		return cluster == ""
	}
	c.rewire.Lock()
	defer c.rewire.Unlock()
	return c.members[cluster] != nil
}

func describeScope[T Object](caches []*Cache[T]) string {
	if len(caches) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range caches {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}

// serves: obj is in this replica's share of the objects.
func (c *Cache[T]) serves(obj T) bool { return c.share == nil || c.share.Serves(obj) }
