package ctrl

import (
	"context"
	"fmt"
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
)

// CacheOptions select what a [Cache] holds. The zero value caches every
// object of the type in the manager's namespace, with managedFields removed.
// Caches with equal options for the same type are one cache.
type CacheOptions struct {
	// Namespaces restricts the cache to these namespaces, with one watch
	// each behind one view. Ignored for cluster-scoped types. Default: the
	// manager's Options.Namespace, or all namespaces.
	Namespaces []string
	// LabelSelector restricts the cache to matching objects, such as
	// labels.SelectorFromSet(labels.Set{"app": "web"}). An object whose
	// labels stop matching leaves the cache; see [Controller.OnDelete].
	// Default: everything.
	LabelSelector labels.Selector
	// FieldSelector restricts the cache to objects whose fields match, as
	// the API server supports them for the type, such as
	// fields.OneTermEqualSelector("spec.nodeName", node). Default:
	// everything.
	FieldSelector fields.Selector
	// KeepManagedFields keeps metadata.managedFields in cached objects.
	// Default: they are removed as objects arrive; they are large and
	// controllers rarely read them.
	KeepManagedFields bool
	// Resource names the resource a cache of *unstructured.Unstructured or
	// *metav1.PartialObjectMetadata holds, a kind chosen at run time. It
	// must be zero for other types, whose Go type names their resource.
	// Default: none.
	Resource APIResource
	// Fleet makes the cache hold the objects of every engaged member
	// cluster (see [Provider]), under keys that carry the member's name,
	// instead of the manager's own cluster's. Members join and leave while
	// the manager runs; each is listed and watched on its own, and one that
	// cannot be reached holds up no other, nor Start. Default: off.
	Fleet bool
	// Sharded makes the cache hold the objects of the namespaces this
	// replica serves only, in a manager sharded by namespace
	// (Sharding.ByNamespace) where the API server selects by hash: for the
	// caches a sharded controller [Watches], as [Owns] makes its own.
	// Elsewhere, and for cluster-scoped types, it holds every object.
	// Default: every namespace.
	Sharded bool

	// Optional lets the cache's kind be absent: a custom resource whose
	// CustomResourceDefinition may not be installed, such as another
	// project's that the program works with when it is there. Start does
	// not wait for it; the cache watches the CRD (by name, through
	// apiextensions.k8s.io/v1, which needs get, list and watch on
	// customresourcedefinitions), lists the kind once the CRD is
	// Established and serves the cache's version, and goes back to waiting
	// when the CRD is deleted, all while the manager runs. While it waits
	// it holds nothing, as the server does: reads find nothing, its
	// handlers hear nothing, and /readyz and ctrl_cache_waiting_for_crd
	// name the CRD. When a CRD is deleted, the API server deletes its
	// objects first: the cache sees those deletions ([Controller.OnDelete]
	// receives each once, [Controller.OnFinalize] runs, since finalizers
	// hold the CRD's deletion), and objects it still holds when the CRD is
	// gone, whose deletions it did not see, are removed as deletions too.
	// A CRD that stops serving the version, or a namespace no longer
	// watched, removes objects that still exist: they are forgotten, with
	// neither hook. A cache is optional or required, not both: asking for
	// an existing cache with the other choice is an error. Not for fleet
	// caches, nor for built-in kinds. A custom resource that may be
	// missing when the manager is wired declares its scope
	// (APIResource.Namespaced or ClusterScoped): discovery cannot tell it
	// then. Default: required, and Start fails if the kind is not served.
	Optional bool
}

// Cache is a typed, read-only, continuously updated view of the objects of
// one type, fed by a list-and-watch on the API server (one per namespace of
// CacheOptions.Namespaces). All controllers, clients and indexes that ask
// for the same type with the same [CacheOptions] share one Cache. A cache
// that only controllers and their [Owns] and [Watches] use stops, and
// lets its objects go, when the last of them is removed ([Controller.Stop],
// [Unwatch]); one made by [NewCache] stays while the manager runs.
//
// Objects returned by Get, List and ByIndex are shared with the cache and
// every other reader: never modify them; call DeepCopyObject first. They
// carry their apiVersion and kind, which typed decoding drops. The
// cache may lag the server: a write is visible here only once its watch
// event has arrived. All methods are safe for concurrent use.
type Cache[T Object] struct {
	mgr  *Manager
	b    *binding.Binding[T] // the own cluster's; a fleet cache's has only Info
	opts CacheOptions
	// scope is what the cache selects; its namespaces change with
	// SetNamespaces, so they are read from namespaces (see currentScope).
	scope      scope
	namespaces atomic.Pointer[[]string]
	share      act.Share // the part of the objects this replica holds; nil: all
	kind       string    // for causes: "ConfigMap"
	synced     chan struct{}
	syncOnce   sync.Once
	opt        *optional // nil for a required kind
	refs       cacheRefs // under mgr.mu
	// typeMeta is stamped on every object stored: typed decoding drops it.
	typeMeta metav1.TypeMeta

	// The inputs that decide the feeds (feeds.go), and the feeds, changed
	// under rewire; feeds is read without it.
	rewire    sync.Mutex
	running   context.Context // set while the cache runs
	runLog    logr.Logger
	members   map[string]*binding.Binding[T] // a fleet cache's engaged members
	served    types.UID                      // an optional cache's CRD, while it serves the version
	feeds     atomic.Pointer[map[feedKey]*feed[T]]
	refeeding atomic.Bool
	feedRun   sync.WaitGroup

	mu        sync.RWMutex
	items     objects[T]
	indexes   map[string]*index[T]
	expect    map[Key]expectation
	transform func(T) T // set by run from userTF; read only by the store
	userTF    func(T) T
	onError   func(error)
	handlers  []handler[T]
	started   bool

	// dispatch serializes the changes of every feed: handlers see one
	// change at a time, in order, whichever watch it came from.
	dispatch    sync.Mutex
	dispatching atomic.Int32
	log         logr.Logger // set by run
}

// handler receives a cache's changes, one at a time and in order, on the
// goroutine of the watch they came from. It must not block.
type handler[T Object] interface {
	// changed receives one change from a watch.
	changed(ev event[T])
	// listed receives the additions and updates of a complete list at once
	// (deletions come one at a time through changed).
	listed(evs []event[T])
}

// event is one change of a cached object.
type event[T Object] struct {
	kind eventKind
	key  Key
	old  T // for updates
	obj  T // the new state; for removals, the last known state
}

type eventKind uint8

const (
	added eventKind = iota
	updated
	deleted  // gone from the API server
	left     // still on the server, but no longer selected by the cache
	vanished // missing from a relist of a selective cache: deleted or left
	// forgotten: still on the server, but out of the cache's reach: its
	// namespace is no longer watched, its member cluster left, its CRD no
	// longer serves the cache's version, or its share moved to another
	// replica. Neither a deletion nor an exit from a selector: no hook
	// runs for it, and its finalizer stays for whoever holds it next.
	forgotten
	// joined: a member cluster's first list is in (key names the cluster
	// only): a controller that watches a fleet reconciles its own objects
	// then, since a new member may need what each of them produces.
	joined
)

// NewCache returns the manager's cache of T for opts, creating it on first
// use. A cache created before [Manager.Start] starts with the manager; one
// created later starts at once. A cache made by NewCache is kept while the
// manager runs: [Controller.Stop] and [Unwatch] stop and empty only the
// caches that nothing else uses. It returns an error if T is not a known
// resource or cannot be watched, if opts name a resource for a typed T, or
// if the cache exists and is required where opts say optional, or the
// reverse.
func NewCache[T Object](m *Manager, opts CacheOptions) (*Cache[T], error) {
	u := use[T]{pin: true}
	if opts.Sharded {
		u.share = relatedShare
	}
	return makeCache(m, opts, u)
}

// newCache is NewCache with a first handler, registered before the cache
// can start: for the manager's own caches, made while it runs and kept.
func newCache[T Object](m *Manager, opts CacheOptions, h handler[T]) (*Cache[T], error) {
	return makeCache(m, opts, use[T]{handler: h, pin: true})
}

// String describes the cache for logs and errors: its type, resource and
// scope.
func (c *Cache[T]) String() string {
	if s := c.currentScope().String(); s != "" {
		return c.b.Info.String() + " " + s
	}
	return c.b.Info.String()
}

// Get returns the cached object with the given key. The object is shared:
// do not modify it.
func (c *Cache[T]) Get(key Key) (T, bool) {
	c.mu.RLock()
	obj, ok := c.items.get(key)
	c.mu.RUnlock()
	return obj, ok
}

// List returns the cached objects in namespace ("" for all) that match
// selector (nil for all), in no particular order; in a fleet cache, those
// of every member. The objects are shared: do not modify them. Its cost
// grows with the objects of the namespace, not with those of the whole
// cache.
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
	for _, obj := range c.items.in(cluster, namespace) {
		if selector == nil || selector.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	return out
}

// count returns how many objects the cache holds.
func (c *Cache[T]) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.len()
}

// keys returns the keys of every cached object.
func (c *Cache[T]) keys() []Key {
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := make([]Key, 0, c.items.len())
	for k := range c.items.all() {
		keys = append(keys, k)
	}
	return keys
}

// SetTransform makes the cache pass every object through fn before storing
// it, to drop fields nobody reads and save memory. fn may modify its argument
// and must return the object to store; it must give the same result when
// given its own output, because an object may pass through it twice. It
// runs after managedFields are removed. It returns an error once the cache
// has started or if a transform is already set.
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

// SetWatchErrorHandler sets the function called with each error of the
// cache's list and watch requests (the API server unreachable, a missing
// CustomResourceDefinition, a forbidden list), once per failed request, in
// addition to the manager's logging; a later call replaces it. A watch that
// ends because its resourceVersion was compacted away (410 Gone) is not an
// error here: the cache relists at once and counts it in
// ctrl_cache_relists_total. fn is called on the cache's goroutines, one
// call at a time per watch, and must not block.
func (c *Cache[T]) SetWatchErrorHandler(fn func(error)) {
	c.mu.Lock()
	c.onError = fn
	c.mu.Unlock()
}

// HasSynced reports whether the cache has completed its first list, or,
// for an optional kind, found its CustomResourceDefinition missing: either
// way it is in step with the server.
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

// addHandler registers h for every change from now on. Handlers are added
// while wiring, before the manager starts; see addLiveHandler for later.
func (c *Cache[T]) addHandler(h handler[T]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	c.handlers = append(c.handlers, h)
	return nil
}

// describe, with busy, notReady and Cache's other unexported methods in
// this package, implements managedCache, the manager's view of a cache.
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

// notFound is the error a cached read returns for a missing object, with
// the meaning apierrors.IsNotFound recognizes.
func (c *Cache[T]) notFound(key Key) error {
	return apierrors.NewNotFound(c.b.GVR.GroupResource(), key.Name)
}
