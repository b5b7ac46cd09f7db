package ctrl

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/watcher"
)

// CacheOptions select what a [Cache] holds. The zero value caches every
// object of the type in the manager's namespace, with managedFields removed.
// Caches with equal options for the same type are one cache.
type CacheOptions struct {
	// Namespace restricts the cache to one namespace. Default: the
	// manager's Options.Namespace. Ignored for cluster-scoped types.
	Namespace string
	// LabelSelector restricts the cache to matching objects, in the syntax
	// of kubectl's -l flag. Default: everything.
	LabelSelector string
	// FieldSelector restricts the cache to objects whose fields match, as
	// the API server supports them for the type. Default: everything.
	FieldSelector string
	// ResyncPeriod, if positive, makes every controller of the cache
	// reconcile every cached object at this interval. Default: never.
	ResyncPeriod time.Duration
	// KeepManagedFields keeps metadata.managedFields in cached objects.
	// Default: they are removed as objects arrive; they are large and
	// controllers rarely read them.
	KeepManagedFields bool
}

// Cache is a typed, read-only, continuously updated view of the objects of
// one type, fed by a single list-and-watch on the API server. All
// controllers, clients and indexes that ask for the same type with the same
// [CacheOptions] share one Cache.
//
// Objects returned by Get, List and ByIndex are shared with the cache and
// every other reader: never modify them; call DeepCopyObject first. The
// cache may lag the server: a write is visible here only once its watch
// event has arrived. All methods are safe for concurrent use.
type Cache[T Object] struct {
	mgr  *Manager
	b    *binding.Binding[T]
	opts CacheOptions
	sel  labels.Selector // nil: everything

	mu        sync.RWMutex
	items     map[Key]T
	indexes   map[string]*index[T]
	expect    map[Key]expectation
	lastRV    string    // resourceVersion of the latest event or list applied
	transform func(T) T // set by run from userTransform; read only by the store
	userTF    func(T) T
	onError   func(error)
	handlers  []handler[T]
	started   bool

	synced      chan struct{} // closed after the first complete list
	syncOnce    sync.Once
	dispatching atomic.Int32
	lastErr     atomic.Pointer[error]
	fakeEvents  atomic.Pointer[<-chan watch.Event]
	relists     prometheus.Counter // set by run
	log         logr.Logger        // set by run
}

// handler receives a cache's changes, in order, on the cache's goroutine.
// It must not block.
type handler[T Object] interface {
	add(obj T)
	update(old, obj T)
	delete(obj T)
	resync(obj T)
}

// listHandler is a handler that takes the objects a list added all at
// once, instead of an add for each.
type listHandler[T Object] interface {
	handler[T]
	addListed(objs []T)
}

type index[T Object] struct {
	fn     func(T) []string
	values map[string]map[Key]struct{}
}

// expectation is a write through a [Client] that the cache has not observed.
type expectation struct {
	rv       string // observed once the cached object has this version or newer
	deleting bool   // observed once the object is gone or has a deletionTimestamp
	writes   int    // fake backends: events still to come
}

// NewCache returns the manager's cache of T for opts, creating it on first
// use. A cache created before [Manager.Start] starts with the manager; one
// created later starts at once. It returns an error if T is not a known
// resource or cannot be watched, or if a selector does not parse.
func NewCache[T Object](m *Manager, opts CacheOptions) (*Cache[T], error) {
	b, err := bind[T](m)
	if err != nil {
		return nil, err
	}
	if !b.Watchable {
		return nil, fmt.Errorf("ctrl: cache of %s: the resource cannot be listed or watched", b.Info)
	}
	if !b.Namespaced {
		opts.Namespace = ""
	} else if opts.Namespace == "" {
		opts.Namespace = m.opts.Namespace
	}
	var sel labels.Selector
	if opts.LabelSelector != "" {
		if sel, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, fmt.Errorf("ctrl: cache of %s: label selector: %w", b.Info, err)
		}
		opts.LabelSelector = sel.String()
	}
	if opts.FieldSelector != "" {
		fs, err := fields.ParseSelector(opts.FieldSelector)
		if err != nil {
			return nil, fmt.Errorf("ctrl: cache of %s: field selector: %w", b.Info, err)
		}
		opts.FieldSelector = fs.String()
	}
	id := cacheID{typ: b.Type, opts: opts}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.caches[id]; ok {
		return c.(*Cache[T]), nil
	}
	c := &Cache[T]{
		mgr:     m,
		b:       b,
		opts:    opts,
		sel:     sel,
		items:   map[Key]T{},
		indexes: map[string]*index[T]{},
		expect:  map[Key]expectation{},
		synced:  make(chan struct{}),
	}
	m.caches[id] = c
	m.cacheList = append(m.cacheList, c)
	if m.running != nil {
		m.startCache(c)
	}
	return c, nil
}

type cacheID struct {
	typ  reflect.Type
	opts CacheOptions
}

func stripManagedFields[T Object](obj T) T {
	obj.SetManagedFields(nil)
	return obj
}

// String describes the cache for logs and errors: its type, resource and
// scope.
func (c *Cache[T]) String() string {
	s := c.b.Info.String()
	if c.opts.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", c.opts.Namespace)
	}
	if c.opts.LabelSelector != "" {
		s += fmt.Sprintf(" with labels %q", c.opts.LabelSelector)
	}
	if c.opts.FieldSelector != "" {
		s += fmt.Sprintf(" with fields %q", c.opts.FieldSelector)
	}
	return s
}

// Get returns the cached object with the given key. The object is shared:
// do not modify it.
func (c *Cache[T]) Get(key Key) (T, bool) {
	c.mu.RLock()
	obj, ok := c.items[key]
	c.mu.RUnlock()
	return obj, ok
}

// List returns the cached objects in namespace ("" for all) that match
// selector (nil for all), in no particular order. The objects are shared:
// do not modify them.
func (c *Cache[T]) List(namespace string, selector labels.Selector) []T {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []T
	for k, obj := range c.items {
		if namespace != "" && k.Namespace != namespace {
			continue
		}
		if selector != nil && !selector.Matches(labels.Set(obj.GetLabels())) {
			continue
		}
		out = append(out, obj)
	}
	return out
}

// AddIndex adds an index named name. fn returns the values under which an
// object is found by [Cache.ByIndex]; it must be fast, must not block, and
// must not modify the object. Objects already cached are indexed at once.
// It returns an error if the name is taken.
func (c *Cache[T]) AddIndex(name string, fn func(T) []string) error {
	if fn == nil {
		return fmt.Errorf("ctrl: index %q on %s: nil function", name, c)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.indexes[name]; ok {
		return fmt.Errorf("ctrl: index %q on %s already exists", name, c)
	}
	idx := &index[T]{fn: fn, values: map[string]map[Key]struct{}{}}
	for k, obj := range c.items {
		idx.add(k, obj)
	}
	c.indexes[name] = idx
	return nil
}

// ByIndex returns the cached objects that the index named name files under
// value. The objects are shared: do not modify them. It returns an error if
// there is no such index.
func (c *Cache[T]) ByIndex(name, value string) ([]T, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx, ok := c.indexes[name]
	if !ok {
		return nil, fmt.Errorf("ctrl: %s has no index %q", c, name)
	}
	keys := idx.values[value]
	out := make([]T, 0, len(keys))
	for k := range keys {
		out = append(out, c.items[k])
	}
	return out, nil
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

// OnWatchError sets a function called with each error of the cache's list
// and watch requests (the API server unreachable, a missing
// CustomResourceDefinition, a forbidden list), in addition to the manager's
// logging. A watch that ends because its resourceVersion was compacted away
// (410 Gone) is not an error here: the cache relists at once and counts it
// in ctrl_cache_relists_total. fn is called on the cache's goroutine and
// must not block.
func (c *Cache[T]) OnWatchError(fn func(error)) {
	c.mu.Lock()
	c.onError = fn
	c.mu.Unlock()
}

// HasSynced reports whether the cache has completed its first list.
func (c *Cache[T]) HasSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until the cache has completed its first list, or ctx
// is done. Before the manager starts, it waits for the start.
func (c *Cache[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-c.synced:
		return nil
	case <-ctx.Done():
		err := fmt.Errorf("ctrl: %s did not sync: %w", c, context.Cause(ctx))
		if last := c.lastErr.Load(); last != nil {
			err = fmt.Errorf("%w; last watch error: %w", err, *last)
		}
		return err
	}
}

// addHandler registers h for every change from now on. Handlers are added
// while wiring, before the manager starts.
func (c *Cache[T]) addHandler(h handler[T]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	c.handlers = append(c.handlers, h)
	return nil
}

// describe and the other unexported methods below implement runner, the
// manager's view of a cache.
func (c *Cache[T]) describe() string { return c.String() }

func (c *Cache[T]) lastError() error {
	if e := c.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

func (c *Cache[T]) syncedChan() <-chan struct{} { return c.synced }

// run lists and watches until ctx is done.
func (c *Cache[T]) run(ctx context.Context, log logr.Logger) {
	c.mu.Lock()
	c.started = true
	strip, user := !c.opts.KeepManagedFields, c.userTF
	switch {
	case strip && user != nil:
		c.transform = func(obj T) T { return user(stripManagedFields(obj)) }
	case strip:
		c.transform = stripManagedFields[T]
	default:
		c.transform = user
	}
	c.mu.Unlock()
	lw := &listWatch[T]{c: c}
	res := c.b.GVR.Resource
	if c.b.GVR.Group != "" {
		res += "." + c.b.GVR.Group
	}
	connected := c.mgr.metrics.WatchConnected.WithLabelValues(res, c.opts.Namespace)
	blind := c.mgr.metrics.Blind.WithLabelValues(res, c.opts.Namespace)
	c.relists = c.mgr.metrics.Relists.WithLabelValues(res, c.opts.Namespace)
	c.log = log
	watcher.Run(ctx, watcher.Config{
		Name:         c.String(),
		Type:         binding.New[T](),
		ListerWatch:  lw,
		Store:        (*store[T])(c),
		ResyncPeriod: c.opts.ResyncPeriod,
		Logger:       log,
		OnConnected: func(ok bool, d time.Duration) {
			if ok {
				connected.Set(1)
				if d > 0 {
					blind.Observe(d.Seconds())
				}
			} else {
				connected.Set(0)
			}
		},
		OnError: func(err error) {
			c.lastErr.Store(&err)
			c.mu.RLock()
			fn := c.onError
			c.mu.RUnlock()
			if fn != nil {
				fn(err)
			}
		},
	})
}

// listWatch lists and watches the cache's scope through the binding.
type listWatch[T Object] struct{ c *Cache[T] }

func (lw *listWatch[T]) options(opts metav1.ListOptions) metav1.ListOptions {
	opts.LabelSelector = lw.c.opts.LabelSelector
	opts.FieldSelector = lw.c.opts.FieldSelector
	return opts
}

func (lw *listWatch[T]) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *listWatch[T]) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

func (lw *listWatch[T]) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return lw.c.b.List(ctx, lw.c.opts.Namespace, lw.options(opts))
}

func (lw *listWatch[T]) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.c.b.Watch(ctx, lw.c.opts.Namespace, lw.options(opts))
	if err == nil && lw.c.b.Fake() {
		ch := w.ResultChan()
		lw.c.fakeEvents.Store(&ch)
		// A fake replays changes made between its list and its watch, but
		// not deletions: a cache that reported sync after its list would
		// miss deletions made right after WaitForSync returned.
		lw.c.markSynced()
	}
	return w, err
}

// IsWatchListSemanticsUnSupported tells the reflector that fakes cannot
// stream the initial list.
func (lw *listWatch[T]) IsWatchListSemanticsUnSupported() bool { return lw.c.b.Fake() }

func (idx *index[T]) add(k Key, obj T) {
	for _, v := range idx.fn(obj) {
		set := idx.values[v]
		if set == nil {
			set = map[Key]struct{}{}
			idx.values[v] = set
		}
		set[k] = struct{}{}
	}
}

func (idx *index[T]) remove(k Key, obj T) {
	for _, v := range idx.fn(obj) {
		if set := idx.values[v]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(idx.values, v)
			}
		}
	}
}

// notFound is the error a cached read returns for a missing object, with
// the meaning apierrors.IsNotFound recognizes.
func (c *Cache[T]) notFound(key Key) error {
	return apierrors.NewNotFound(c.b.GVR.GroupResource(), key.Name)
}

// covers reports whether the cache holds every object that could have key.
func (c *Cache[T]) covers(key Key) bool {
	return c.opts.LabelSelector == "" && c.opts.FieldSelector == "" &&
		(c.opts.Namespace == "" || c.opts.Namespace == key.Namespace)
}
