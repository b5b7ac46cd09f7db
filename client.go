package ctrl

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/probe"
	"github.com/typedctrl/ctrl/internal/scope"
)

// ClientOptions configure a [Client]. The zero value serves a typed T.
type ClientOptions struct {
	// Resource names the resource a client of *unstructured.Unstructured
	// serves. It must be zero for other types.
	Resource APIResource
}

// Client reads and writes objects of type T: reads from the manager's
// caches unless [Client.Uncached] (see "Reading objects" in the package
// doc), writes to the API server. A namespaced type's key or object without
// a namespace is an error, never a NotFound. Safe for concurrent use.
//
// A cached read needs a cache of T with no selector covering its
// namespace; a client never creates one: the error says which to add.
// Writes under a reconcile's context are fenced (One leader); under
// another context, such as context.Background(), they are not checked.
type Client[T Object] struct {
	m        *Manager
	b        *binding.Binding[T] // the own cluster's; only its Info if ownErr is set
	ownErr   error               // why the own cluster cannot serve T
	cluster  string              // of objects and of keys without one
	uncached bool
}

// NewClient returns a client of T for the own cluster and fleet members
// ([Client.InCluster], or keys naming a cluster); for a type only members
// serve, own-cluster calls fail with the error binding it there gave. It
// returns an error if T is not a known resource, nothing serves it, or opts
// name a resource for a typed T.
func NewClient[T Object](m *Manager, opts ClientOptions) (*Client[T], error) {
	b, err := bind[T](m, opts.Resource)
	if err == nil {
		return &Client[T]{m: m, b: b}, nil
	}
	res, ierr := opts.Resource.info(reflect.TypeFor[T]())
	if ierr != nil {
		return nil, err
	}
	info, ierr := binding.InfoFor[T](res)
	if ierr != nil || m.opts.ClusterProvider == nil && len(m.Clusters()) == 0 {
		return nil, err // not a fleet: the error belongs to wiring
	}
	return &Client[T]{m: m, b: &binding.Binding[T]{Info: info}, ownErr: err}, nil
}

// InCluster returns a client of T bound to cluster, a fleet member or ""
// for the own, for objects and keys that name no cluster. In a reconcile,
// [RequestFrom] names the object's cluster.
func (c *Client[T]) InCluster(cluster string) *Client[T] {
	in := *c
	in.cluster = cluster
	return &in
}

func (c *Client[T]) at(key Key) Key {
	if key.Cluster == "" {
		key.Cluster = c.cluster
	}
	return key
}

func (c *Client[T]) backend(cluster string) (binding.Backend[T], error) {
	if cluster == "" {
		if c.ownErr != nil {
			return nil, c.ownErr
		}
		return c.b.Backend, nil
	}
	b, err := bindIn[T](c.m, cluster, c.resource())
	if err != nil {
		return nil, err
	}
	return b.Backend, nil
}

func (c *Client[T]) resource() APIResource { return resourceOption(c.b.Info) }

// Uncached returns a client of T whose Get and List go to the API server
// instead of the cache: for types the program does not cache, and reads
// that must not lag.
func (c *Client[T]) Uncached() *Client[T] {
	u := *c
	u.uncached = true
	return &u
}

func (c *Client[T]) wrap(verb string, key Key, err error) error {
	if err == nil {
		return nil
	}
	return &requestError{verb: verb, typ: c.b.Type, resource: c.b.GVR.GroupResource(), key: key, err: err}
}

// requestError names resource and key: see Controller.vanished.
type requestError struct {
	verb     string // "get", "create", "update status of", ...
	typ      reflect.Type
	resource schema.GroupResource
	key      Key
	err      error
}

func (e *requestError) Error() string {
	return fmt.Sprintf("ctrl: %s %s %s: %v", e.verb, e.typ, e.key, e.err)
}

func (e *requestError) Unwrap() error { return e.err }

// written: not a read, nor a create (whose NotFound is about its namespace).
func (e *requestError) written() bool { return e.verb != "get" && e.verb != "create" }

// cache returns the synced cache of T that covers, or says which cache to add.
func (c *Client[T]) cache(ctx context.Context, what string, covers func(*Cache[T]) bool) (*Cache[T], error) {
	caches := cachesOf(c.m, c.b)
	var pick *Cache[T]
	for _, cc := range caches {
		if covers(cc) && (pick == nil || cc.HasSynced() && !pick.HasSynced()) {
			pick = cc
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("no cache of %s holds %s (caches: %s): add one with ctrl.NewCache, or read with Client.Uncached",
			c.b.Info, what, describeScope(caches))
	}
	select {
	case <-c.m.stopped:
		if !pick.HasSynced() {
			return nil, errors.New("the manager has stopped: read with Client.Uncached")
		}
	default:
	}
	if err := pick.WaitForSync(ctx); err != nil {
		return nil, err
	}
	return pick, nil
}

// Get returns the object with key: a copy the caller owns, or an error for
// which apierrors.IsNotFound is true. It waits for the cache to sync.
func (c *Client[T]) Get(ctx context.Context, key Key) (T, error) {
	obj, cached, err := c.read(ctx, key)
	if cached {
		obj = obj.DeepCopyObject().(T)
	}
	return obj, err
}

// read is Get, but returns the cache's object itself, shared (cached).
func (c *Client[T]) read(ctx context.Context, key Key) (obj T, cached bool, err error) {
	var zero T
	key = c.at(key)
	if err := c.checkKey("get", key); err != nil {
		return zero, false, err
	}
	if c.uncached {
		b, err := c.backend(key.Cluster)
		if err != nil {
			return zero, false, c.wrap("get", key, err)
		}
		obj, err := b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
		if err != nil {
			return obj, false, c.wrap("get", key, probe.Tag(ctx, key.Cluster, err))
		}
		stamp(obj, typeMetaOf(c.b.Info))
		return obj, false, nil
	}
	cc, err := c.cache(ctx, key.String(), func(cc *Cache[T]) bool { return cc.covers(key) })
	if err != nil {
		return zero, false, c.wrap("get", key, err)
	}
	obj, ok := cc.Get(key)
	if !ok {
		return zero, false, c.wrap("get", key, cc.notFound(key))
	}
	return obj, true, nil
}

// ListParams select objects for [Client.List]. The zero value lists every
// object in the manager's scope.
type ListParams struct {
	// Namespace restricts the list to one namespace. Default: the manager's
	// Options.Namespace (all namespaces if that is empty).
	Namespace string
	// LabelSelector restricts the list to matching objects. Default: all.
	LabelSelector labels.Selector
	// FieldSelector restricts the list to objects whose fields match, as the
	// server supports them; a cached list evaluates it by field path. Default:
	// all.
	FieldSelector fields.Selector
	// Limit, for an uncached list, is the page size (continue tokens). Ignored
	// for cached lists. Default: one page.
	Limit int64
	// Cluster lists a member cluster of the fleet. Default: the client's
	// cluster ([Client.InCluster]), or the manager's own.
	Cluster string
	// Index lists only the objects the cache's index of this name
	// ([Cache.AddIndex]) files under IndexValue, in Namespace or all if "",
	// at a cost that grows with the objects found; selectors apply after
	// it. Cached lists only. Default: no index.
	Index string
	// IndexValue is the value looked up in Index.
	IndexValue string
}

// List returns the matching objects: copies the caller owns, in no
// particular order.
func (c *Client[T]) List(ctx context.Context, opts ListParams) ([]T, error) {
	if opts.Namespace == "" && c.b.Namespaced && opts.Cluster == "" && c.cluster == "" {
		opts.Namespace = c.m.opts.Namespace
	}
	if opts.Cluster == "" {
		opts.Cluster = c.cluster
	}
	wrap := func(err error) error {
		return fmt.Errorf("ctrl: list %s in namespace %q: %w", c.b.Type, opts.Namespace, err)
	}
	if c.uncached {
		if opts.Index != "" {
			return nil, wrap(fmt.Errorf("index %q: indexes are in caches: list with a cached client", opts.Index))
		}
		items, err := c.listPages(ctx, opts)
		if err != nil {
			return nil, wrap(err)
		}
		return items, nil
	}
	what := "every namespace"
	if opts.Namespace != "" {
		what = fmt.Sprintf("namespace %q", opts.Namespace)
	}
	if opts.Cluster != "" {
		what += fmt.Sprintf(" of cluster %q", opts.Cluster)
	}
	covers := func(cc *Cache[T]) bool { return cc.coversNamespace(opts.Cluster, opts.Namespace) }
	if opts.Index != "" {
		if err := c.checkIndex(opts, what, covers); err != nil {
			return nil, wrap(err)
		}
		what += fmt.Sprintf(" with index %q", opts.Index)
		covers = func(cc *Cache[T]) bool {
			return cc.coversNamespace(opts.Cluster, opts.Namespace) && cc.hasIndex(opts.Index)
		}
	}
	cc, err := c.cache(ctx, what, covers)
	if err != nil {
		return nil, wrap(err)
	}
	var objs []T
	if opts.Index == "" {
		objs = cc.ListIn(opts.Cluster, opts.Namespace, opts.LabelSelector)
	} else {
		inCluster := func(k Key) bool { return k.Cluster == opts.Cluster }
		if objs, err = cc.byIndex(opts.Namespace, opts.Index, opts.IndexValue, inCluster); err != nil {
			return nil, wrap(err)
		}
		if sel := opts.LabelSelector; sel != nil {
			objs = slices.DeleteFunc(objs, func(o T) bool { return !sel.Matches(labels.Set(o.GetLabels())) })
		}
	}
	if fs := opts.FieldSelector; fs != nil && !fs.Empty() {
		sc := scope.Scope{Fields: fs}
		objs = slices.DeleteFunc(objs, func(o T) bool { return sc.Selects(o) != scope.Selected })
	}
	for i, o := range objs {
		objs[i] = o.DeepCopyObject().(T)
	}
	return objs, nil
}

// checkIndex says how to add the index opts names, if a covering cache lacks it.
func (c *Client[T]) checkIndex(opts ListParams, what string, covers func(*Cache[T]) bool) error {
	var covering []*Cache[T]
	for _, cc := range cachesOf(c.m, c.b) {
		if covers(cc) {
			if cc.hasIndex(opts.Index) {
				return nil
			}
			covering = append(covering, cc)
		}
	}
	if len(covering) == 0 {
		return nil // the cache lookup says which cache to add
	}
	return fmt.Errorf("no cache of %s that holds %s has index %q (caches: %s): add it with Cache.AddIndex",
		c.b.Info, what, opts.Index, describeScope(covering))
}

func (c *Client[T]) listPages(ctx context.Context, opts ListParams) ([]T, error) {
	lo := metav1.ListOptions{Limit: opts.Limit}
	if opts.LabelSelector != nil {
		lo.LabelSelector = opts.LabelSelector.String()
	}
	if opts.FieldSelector != nil {
		lo.FieldSelector = opts.FieldSelector.String()
	}
	b, err := c.backend(opts.Cluster)
	if err != nil {
		return nil, err
	}
	var items []T
	tm := typeMetaOf(c.b.Info)
	for {
		l, err := b.List(ctx, opts.Namespace, lo)
		if err != nil {
			return nil, probe.Tag(ctx, opts.Cluster, err)
		}
		for _, obj := range l.Items {
			stamp(obj, tm)
		}
		items = append(items, l.Items...)
		if l.Continue == "" || opts.Limit <= 0 {
			return items, nil
		}
		lo.Continue = l.Continue
	}
}

// checkKey rejects a key without a namespace for a namespaced resource: it
// would come back NotFound, which reads like success after a Delete.
func (c *Client[T]) checkKey(verb string, key Key) error {
	if c.b.Namespaced && key.Namespace == "" {
		return fmt.Errorf("ctrl: %s %s %s: the resource is namespaced and the key has no namespace", verb, c.b.Type, key)
	}
	return nil
}
