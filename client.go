package ctrl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
)

// ClientOptions configure a [Client]. The zero value serves a typed T.
type ClientOptions struct {
	// Resource names the resource a client of *unstructured.Unstructured
	// reads and writes, a kind chosen at run time. It must be zero for
	// other types, whose Go type names their resource. Default: none.
	Resource APIResource
}

// Client reads and writes objects of type T. Reads come from the manager's
// caches of T unless the client is [Client.Uncached]; writes go to the API
// server. Every method returns errors that keep their API meaning through
// wrapping: apierrors.IsNotFound, apierrors.IsConflict and friends work on
// them. A Client is safe for concurrent use.
//
// A cached read uses a cache of T that holds every object the read could
// return: one without a selector whose namespaces include the read's. A
// client never creates a cache: a read that no cache covers is an error
// that says which cache to add, so that no program watches more than it
// chose to.
//
// Writes made through a Client are tracked until the manager's caches of T
// have observed them, which is what lets [Manager.WaitIdle] return only
// after their consequences have been reconciled.
//
// With leader election, a write made under a reconcile's context (or one
// derived from it) fails with [ErrLeadershipLost], without a request, once
// this replica's leadership has ended ([CheckLeadership]); see
// [LeaderElection]. A write under another context, such as
// context.Background(), is not checked.
type Client[T Object] struct {
	m        *Manager
	b        *binding.Binding[T] // the own cluster's; only its Info if ownErr is set
	ownErr   error               // why the own cluster cannot serve T
	cluster  string              // of objects and of keys without one
	uncached bool
}

// NewClient returns a client of T for the manager. It returns an error if T
// is not a known resource, or no configured client serves it, or opts name
// a resource for a typed T.
//
// A client reaches the manager's own cluster, and the members of its fleet
// through [Client.InCluster] or keys that name their cluster. A type that only
// members serve gets a client too; its use in the own cluster returns the
// error that binding it there gave.
func NewClient[T Object](m *Manager, opts ClientOptions) (*Client[T], error) {
	b, err := bind[T](m, opts.Resource)
	if err == nil {
		return &Client[T]{m: m, b: b}, nil
	}
	var res *binding.Info
	if opts.Resource != (APIResource{}) {
		i := opts.Resource.info(reflect.TypeFor[T]())
		res = &i
	}
	info, ierr := binding.InfoFor[T](res)
	if ierr != nil || m.opts.ClusterProvider == nil && len(m.Clusters()) == 0 {
		return nil, err // not a fleet: the error belongs to wiring
	}
	return &Client[T]{m: m, b: &binding.Binding[T]{Info: info}, ownErr: err}, nil
}

// InCluster returns a client of T bound to cluster: a member of the fleet, or ""
// for the manager's own. Its writes of objects (Create, Update, Apply, ...)
// go to that cluster, and so do its reads and writes of keys that name no
// cluster; a key that names one is always served by that one. In a
// reconcile, [ClusterFrom] names the reconciled object's cluster.
func (c *Client[T]) InCluster(cluster string) *Client[T] {
	in := *c
	in.cluster = cluster
	return &in
}

// at fills in the client's cluster for a key that names none.
func (c *Client[T]) at(key Key) Key {
	if key.Cluster == "" {
		key.Cluster = c.cluster
	}
	return key
}

// backend returns the backend of T in cluster.
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

// resource is the Resource option of T, for binding it in members.
func (c *Client[T]) resource() APIResource { return resourceOption(c.b.Info) }

// Uncached returns a client of T whose Get and List go to the API server
// instead of the cache (controller-runtime's APIReader): for types the
// program does not cache, and reads that must not lag. Writes are the same.
func (c *Client[T]) Uncached() *Client[T] {
	u := *c
	u.uncached = true
	return &u
}

func (c *Client[T]) wrap(verb string, key Key, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("ctrl: %s %s %s: %w", verb, c.b.Type, key, err)
}

// cache returns the cache of T that covers what covers reports, waiting for
// it to sync, or an error that says which cache to add.
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

// Get returns the object with key: a copy the caller owns. It waits for the
// cache to sync on first use. A missing object is an error for which
// apierrors.IsNotFound is true.
func (c *Client[T]) Get(ctx context.Context, key Key) (T, error) {
	var zero T
	key = c.at(key)
	if c.uncached {
		b, err := c.backend(key.Cluster)
		if err != nil {
			return zero, c.wrap("get", key, err)
		}
		obj, err := b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
		return obj, c.wrap("get", key, tagUnreachable(ctx, key.Cluster, err))
	}
	cc, err := c.cache(ctx, key.String(), func(cc *Cache[T]) bool { return cc.covers(key) })
	if err != nil {
		return zero, c.wrap("get", key, err)
	}
	obj, ok := cc.Get(key)
	if !ok {
		return zero, c.wrap("get", key, cc.notFound(key))
	}
	return obj.DeepCopyObject().(T), nil
}

// ListOptions select objects for [Client.List]. The zero value lists every
// object in the manager's scope.
type ListOptions struct {
	// Namespace restricts the list to one namespace. Default: the manager's
	// Options.Namespace (all namespaces if that is empty).
	Namespace string
	// LabelSelector restricts the list to matching objects. Default: all.
	LabelSelector labels.Selector
	// FieldSelector restricts the list to objects whose fields match, as
	// the API server supports them for the type. A cached list evaluates
	// it on the cached objects by their field paths. Default: all.
	FieldSelector fields.Selector
	// Limit, for an uncached list, is the page size: the list is read a
	// page at a time with continue tokens, so the server never builds a
	// huge response at once. Ignored for cached lists. Default: one page.
	Limit int64
	// Cluster lists a member cluster of the fleet. Default: the client's
	// cluster ([Client.InCluster]), or the manager's own.
	Cluster string
}

// List returns the matching objects: copies the caller owns, in no
// particular order.
func (c *Client[T]) List(ctx context.Context, opts ListOptions) ([]T, error) {
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
	cc, err := c.cache(ctx, what, func(cc *Cache[T]) bool { return cc.coversNamespace(opts.Cluster, opts.Namespace) })
	if err != nil {
		return nil, wrap(err)
	}
	objs := cc.ListIn(opts.Cluster, opts.Namespace, opts.LabelSelector)
	if fs := opts.FieldSelector; fs != nil && !fs.Empty() {
		sc := scope{fields: fs}
		objs = slices.DeleteFunc(objs, func(o T) bool { return sc.selects(o) != selected })
	}
	for i, o := range objs {
		objs[i] = o.DeepCopyObject().(T)
	}
	return objs, nil
}

// listPages lists from the server, a page of opts.Limit at a time.
func (c *Client[T]) listPages(ctx context.Context, opts ListOptions) ([]T, error) {
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
	for {
		l, err := b.List(ctx, opts.Namespace, lo)
		if err != nil {
			return nil, tagUnreachable(ctx, opts.Cluster, err)
		}
		items = append(items, l.Items...)
		if l.Continue == "" || opts.Limit <= 0 {
			return items, nil
		}
		lo.Continue = l.Continue
	}
}

// write performs a write to key in its cluster, tracked by every cache of
// T that holds that cluster's objects. ctx is the request's. Every write
// of a Client comes here: one whose context carries a leadership that has
// ended (a reconcile's, on a replica past its deadline) fails without a
// request.
func (c *Client[T]) write(ctx context.Context, key Key, deleting bool, do func(b binding.Backend[T]) (T, error)) (T, error) {
	if err := leader.Check(ctx); err != nil {
		return binding.New[T](), err
	}
	b, err := c.backend(key.Cluster)
	if err != nil {
		return binding.New[T](), err
	}
	var done []func(T, bool, error)
	for _, cc := range cachesOf(c.m, c.b) {
		done = append(done, cc.expectWrite(key))
	}
	obj, err := do(b)
	for _, d := range done {
		d(obj, deleting, err)
	}
	return obj, tagUnreachable(ctx, key.Cluster, err)
}

func (c *Client[T]) checkNil(verb string, obj T) error {
	if v := reflect.ValueOf(obj); !v.IsValid() || v.IsNil() {
		return fmt.Errorf("ctrl: %s %s: nil object", verb, c.b.Type)
	}
	return nil
}

// checkObject rejects what the server would answer confusingly: nil, and a
// namespaced object without a namespace (a request for every namespace).
func (c *Client[T]) checkObject(verb string, obj T) error {
	if err := c.checkNil(verb, obj); err != nil {
		return err
	}
	if c.b.Namespaced && obj.GetNamespace() == "" {
		return fmt.Errorf("ctrl: %s %s %s: the resource is namespaced and the object has no namespace", verb, c.b.Type, KeyOf(obj))
	}
	return nil
}

// Create creates obj and returns the object the server stored.
//
// A create whose reply is lost (the connection died after the request was
// sent) may have happened. So that a later Create of the same name through
// this manager can tell, a create of a named object stamps it with the
// annotation ctrl.dev/create-id, a random value of that request alone: if
// the later Create finds the object carrying the value of the lost
// attempt, it returns that object instead of an AlreadyExists error. An
// object of the same name that anyone else created, this program's other
// replicas included, is still AlreadyExists. A create with generateName
// cannot be recognized so, and may create twice.
func (c *Client[T]) Create(ctx context.Context, obj T) (T, error) {
	if err := c.checkObject("create", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	var id string
	if key.Name != "" {
		obj, id = stampCreate(obj)
	}
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Create(ctx, obj, metav1.CreateOptions{FieldManager: c.m.opts.FieldManager})
	})
	if key.Name != "" {
		if mine, ok := c.m.lostCreates.settle(ctx, c, key, id, err); ok {
			return mine.(T), nil
		}
	}
	return out, c.wrap("create", key, err)
}

// Update replaces obj. The resourceVersion of obj is a precondition: if the
// object changed since it was read, the error is a conflict
// (apierrors.IsConflict), and the usual answer is to return it from
// reconcile, which retries with the latest object.
func (c *Client[T]) Update(ctx context.Context, obj T) (T, error) {
	if err := c.checkObject("update", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Update(ctx, obj, metav1.UpdateOptions{FieldManager: c.m.opts.FieldManager})
	})
	return out, c.wrap("update", key, err)
}

// UpdateStatus replaces the status of obj through the status subresource:
// the server ignores every other change in obj. Like Update, it fails with a
// conflict if the object changed since it was read. It returns an error if
// the resource has no status subresource (see APIResource.Status).
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	if err := c.checkObject("update status of", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	if !c.b.Status {
		return obj, c.wrap("update status of", key, c.noStatus())
	}
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.m.opts.FieldManager})
	})
	return out, c.wrap("update status of", key, err)
}

func (c *Client[T]) noStatus() error {
	if c.b.Builtin {
		return errors.New("the resource has no status subresource")
	}
	return errors.New("the resource was registered without a status subresource: set APIResource.Status if its CustomResourceDefinition has one")
}

// Patch applies a patch to the object with key and returns the result. pt
// is types.MergePatchType, types.JSONPatchType, or, for built-in types only,
// types.StrategicMergePatchType. For server-side apply use [Client.Apply];
// to patch what a function changed in an object, [Client.PatchFrom].
func (c *Client[T]) Patch(ctx context.Context, key Key, pt types.PatchType, data []byte) (T, error) {
	return c.patch(ctx, key, pt, data, "")
}

// PatchStatus is [Client.Patch] on the status subresource.
func (c *Client[T]) PatchStatus(ctx context.Context, key Key, pt types.PatchType, data []byte) (T, error) {
	return c.patch(ctx, key, pt, data, "status")
}

func (c *Client[T]) patch(ctx context.Context, key Key, pt types.PatchType, data []byte, sub string) (T, error) {
	key = c.at(key)
	verb := "patch"
	if sub != "" {
		verb = "patch " + sub + " of"
	}
	switch {
	case pt == types.StrategicMergePatchType && !c.b.Builtin:
		return binding.New[T](), fmt.Errorf("ctrl: %s %s %s: custom resources do not support strategic merge patch: use a merge or JSON patch", verb, c.b.Type, key)
	case pt == types.ApplyPatchType || pt == types.ApplyCBORPatchType:
		return binding.New[T](), fmt.Errorf("ctrl: %s %s %s: use Client.Apply for server-side apply", verb, c.b.Type, key)
	case sub == "status" && !c.b.Status:
		return binding.New[T](), c.wrap(verb, key, c.noStatus())
	}
	var subs []string
	if sub != "" {
		subs = []string{sub}
	}
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Patch(ctx, key.Namespace, key.Name, pt, data, metav1.PatchOptions{FieldManager: c.m.opts.FieldManager}, subs...)
	})
	return out, c.wrap(verb, key, err)
}

// PatchFrom writes the changes that turned old into obj, as a JSON merge
// patch (controller-runtime's client.MergeFrom with its optimistic lock):
// the patch carries old's resourceVersion, so if the object changed since
// old was read the error is a conflict, and no concurrent change is
// overwritten. Lists are replaced whole, as merge patches do. Status
// changes are ignored by the server for resources with a status
// subresource. With nothing changed it makes no request and returns obj.
func (c *Client[T]) PatchFrom(ctx context.Context, old, obj T) (T, error) {
	if err := errors.Join(c.checkNil("patch", old), c.checkNil("patch", obj)); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(old))
	if KeyOf(obj) != KeyOf(old) {
		return obj, fmt.Errorf("ctrl: patch %s %s: the changed object is %s", c.b.Type, key, KeyOf(obj))
	}
	patch, err := mergePatch(old, obj)
	if err != nil {
		return obj, c.wrap("patch", key, err)
	}
	if patch == nil {
		return obj, nil
	}
	return c.patch(ctx, key, types.MergePatchType, patch, "")
}

// Operation says what [Client.CreateOrPatch] did.
type Operation string

// The operations of CreateOrPatch. Patched means the object was
// patched, and its status too if mutate changed it; StatusPatched
// means only the status changed, and only the status subresource was
// patched.
const (
	Unchanged     Operation = "unchanged"
	Created       Operation = "created"
	Patched       Operation = "patched"
	StatusPatched Operation = "patchedStatus"
)

// CreateOrPatch makes the object with key what mutate says: mutate receives
// the cached object (a copy), or a new one with only its name and namespace
// set, and changes it. A new object is created; a changed one is patched
// with [Client.PatchFrom], so a concurrent change makes the write fail with
// a conflict; an unchanged one is left alone. It returns the object as
// written (or as it was) and what it did (controller-runtime's
// controllerutil.CreateOrPatch). For a type whose status is a subresource,
// a changed status is patched through the subresource after the object
// (a new object's status is not written: the server ignores it on create).
// If the object's patch succeeds and the status patch fails, it returns
// the object as patched, Patched and the error. mutate must not
// change the name or namespace. Without a cache of T that covers key, it
// reads the server.
func (c *Client[T]) CreateOrPatch(ctx context.Context, key Key, mutate func(obj T) error) (T, Operation, error) {
	key = c.at(key)
	if mutate == nil {
		return binding.New[T](), Unchanged, fmt.Errorf("ctrl: create or patch %s %s: nil mutate function", c.b.Type, key)
	}
	reader := c
	if !c.uncached && !c.coveredByCache(key) {
		reader = c.Uncached()
	}
	cur, err := reader.Get(ctx, key)
	if apierrors.IsNotFound(err) {
		obj := binding.New[T]()
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		if err := c.mutate(key, obj, mutate); err != nil {
			return obj, Unchanged, err
		}
		out, err := c.InCluster(key.Cluster).Create(ctx, obj)
		if err != nil {
			return obj, Unchanged, err
		}
		return out, Created, nil
	}
	if err != nil {
		return cur, Unchanged, err
	}
	changed := cur.DeepCopyObject().(T)
	if err := c.mutate(key, changed, mutate); err != nil {
		return cur, Unchanged, err
	}
	if !c.b.Status {
		patch, err := mergePatch(cur, changed)
		if err != nil || patch == nil {
			return cur, Unchanged, c.wrap("patch", key, err)
		}
		out, err := c.patch(ctx, key, types.MergePatchType, patch, "")
		if err != nil {
			return cur, Unchanged, err
		}
		return out, Patched, nil
	}
	rest, status, err := splitPatches(cur, changed)
	if err != nil {
		return cur, Unchanged, c.wrap("patch", key, err)
	}
	out, op := cur, Unchanged
	if rest != nil {
		patch, err := withResourceVersion(rest, cur.GetResourceVersion())
		if err != nil {
			return cur, Unchanged, c.wrap("patch", key, err)
		}
		if out, err = c.patch(ctx, key, types.MergePatchType, patch, ""); err != nil {
			return cur, Unchanged, err
		}
		op = Patched
	}
	if status != nil {
		// The object's own patch, if any, did not touch the status: the
		// status patch is made against the version it wrote.
		patch, err := withResourceVersion(status, out.GetResourceVersion())
		if err != nil {
			return out, op, c.wrap("patch status of", key, err)
		}
		next, err := c.patch(ctx, key, types.MergePatchType, patch, "status")
		if err != nil {
			return out, op, err
		}
		out = next
		if op == Unchanged {
			op = StatusPatched
		}
	}
	return out, op, nil
}

func (c *Client[T]) mutate(key Key, obj T, mutate func(T) error) error {
	if err := mutate(obj); err != nil {
		return fmt.Errorf("ctrl: create or patch %s %s: %w", c.b.Type, key, err)
	}
	if got := KeyOf(obj); got.Namespace != key.Namespace || got.Name != key.Name {
		return fmt.Errorf("ctrl: create or patch %s %s: mutate changed the object's key to %s", c.b.Type, key, got)
	}
	return nil
}

func (c *Client[T]) coveredByCache(key Key) bool {
	for _, cc := range cachesOf(c.m, c.b) {
		if cc.covers(key) {
			return true
		}
	}
	return false
}

// ApplyOptions configure [Client.Apply].
type ApplyOptions struct {
	// FieldManager owns the applied fields. Default: the manager's
	// Options.FieldManager.
	FieldManager string
	// Force takes ownership of fields other managers own instead of failing
	// with a conflict. Default: off.
	Force bool
	// Status applies to the status subresource. Default: off.
	Status bool
}

// Apply applies obj with server-side apply: the field manager comes to own
// exactly the fields set in obj, and the server merges them into the
// object, creating it if needed. Build obj with only the fields you mean to
// own: every field that is set, even to its zero value when the Go type does
// not omit it, is claimed.
func (c *Client[T]) Apply(ctx context.Context, obj T, opts ApplyOptions) (T, error) {
	if err := c.checkObject("apply", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	obj = obj.DeepCopyObject().(T)
	obj.GetObjectKind().SetGroupVersionKind(c.b.GVK())
	obj.SetManagedFields(nil)
	data, err := json.Marshal(obj)
	if err != nil {
		return obj, fmt.Errorf("ctrl: apply %s %s: %w", c.b.Type, key, err)
	}
	po := metav1.PatchOptions{FieldManager: opts.FieldManager, Force: &opts.Force}
	if po.FieldManager == "" {
		po.FieldManager = c.m.opts.FieldManager
	}
	var subs []string
	if opts.Status {
		if !c.b.Status {
			return obj, c.wrap("apply status of", key, c.noStatus())
		}
		subs = []string{"status"}
	}
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Patch(ctx, key.Namespace, key.Name, types.ApplyPatchType, data, po, subs...)
	})
	return out, c.wrap("apply", key, err)
}

// Delete deletes the object with key. opts carries preconditions (UID,
// resourceVersion) and the propagation policy; the zero value is the
// server's default. An object with finalizers is only marked for deletion
// until they are removed.
func (c *Client[T]) Delete(ctx context.Context, key Key, opts metav1.DeleteOptions) error {
	key = c.at(key)
	_, err := c.write(ctx, key, true, func(b binding.Backend[T]) (T, error) {
		return binding.New[T](), b.Delete(ctx, key.Namespace, key.Name, opts)
	})
	return c.wrap("delete", key, err)
}
