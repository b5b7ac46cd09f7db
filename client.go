package ctrl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Client reads and writes objects of type T. Reads come from the manager's
// cache of T unless the client is [Client.Live]; writes go to the API
// server. Every method returns errors that keep their API meaning through
// wrapping: apierrors.IsNotFound, apierrors.IsConflict and friends work on
// them. A Client is safe for concurrent use.
//
// Writes made through a Client are tracked until the manager's caches of T
// have observed them, which is what lets [Manager.WaitIdle] return only
// after their consequences have been reconciled.
type Client[T Object] struct {
	m    *Manager
	b    *binding.Binding[T]
	live bool
}

// NewClient returns a client of T for the manager. It returns an error if T
// is not a known resource or no configured client serves it.
func NewClient[T Object](m *Manager) (*Client[T], error) {
	b, err := bind[T](m)
	if err != nil {
		return nil, err
	}
	return &Client[T]{m: m, b: b}, nil
}

// Live returns a client of T whose Get and List go to the API server instead
// of the cache: for types the program does not want to cache, or reads that
// must not lag. Writes are the same.
func (c *Client[T]) Live() *Client[T] {
	live := *c
	live.live = true
	return &live
}

func (c *Client[T]) wrap(verb string, key Key, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("ctrl: %s %s %s: %w", verb, c.b.Type, key, err)
}

// cache returns a started cache of T that holds every object that could
// have key: an existing one, or the default cache, created on first use.
func (c *Client[T]) cache(ctx context.Context, key Key) (*Cache[T], error) {
	for _, r := range c.m.cachesOf(c.b.Type) {
		if cc := r.(*Cache[T]); cc.covers(key) && cc.HasSynced() {
			return cc, nil
		}
	}
	cc, err := NewCache[T](c.m, CacheOptions{})
	if err != nil {
		return nil, err
	}
	if !cc.covers(key) {
		return nil, fmt.Errorf("namespace %q is outside the manager's namespace %q: use Client.Live", key.Namespace, cc.opts.Namespace)
	}
	select {
	case <-c.m.stopped:
		return nil, errors.New("the manager has stopped: use Client.Live")
	default:
	}
	if err := cc.WaitForSync(ctx); err != nil {
		return nil, err
	}
	return cc, nil
}

// Get returns the object with key: a copy the caller owns. It waits for the
// cache to sync on first use. A missing object is an error for which
// apierrors.IsNotFound is true.
func (c *Client[T]) Get(ctx context.Context, key Key) (T, error) {
	var zero T
	if c.live {
		obj, err := c.b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
		return obj, c.wrap("get", key, err)
	}
	cc, err := c.cache(ctx, key)
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
}

// List returns the matching objects: copies the caller owns, in no
// particular order.
func (c *Client[T]) List(ctx context.Context, opts ListOptions) ([]T, error) {
	if opts.Namespace == "" && c.b.Namespaced {
		opts.Namespace = c.m.opts.Namespace
	}
	key := Key{Namespace: opts.Namespace}
	wrap := func(err error) error {
		return fmt.Errorf("ctrl: list %s in namespace %q: %w", c.b.Type, opts.Namespace, err)
	}
	if c.live {
		lo := metav1.ListOptions{}
		if opts.LabelSelector != nil {
			lo.LabelSelector = opts.LabelSelector.String()
		}
		l, err := c.b.List(ctx, opts.Namespace, lo)
		if err != nil {
			return nil, wrap(err)
		}
		return l.Items, nil
	}
	cc, err := c.cache(ctx, key)
	if err != nil {
		return nil, wrap(err)
	}
	objs := cc.List(opts.Namespace, opts.LabelSelector)
	for i, o := range objs {
		objs[i] = o.DeepCopyObject().(T)
	}
	return objs, nil
}

// write performs a write to key, tracked by every cache of T.
func (c *Client[T]) write(key Key, deleting bool, do func() (T, error)) (T, error) {
	var done []func(T, bool, error)
	for _, r := range c.m.cachesOf(c.b.Type) {
		done = append(done, r.(*Cache[T]).expectWrite(key))
	}
	obj, err := do()
	for _, d := range done {
		d(obj, deleting, err)
	}
	return obj, err
}

func (c *Client[T]) checkNil(verb string, obj T) error {
	if reflect.ValueOf(obj).IsNil() {
		return fmt.Errorf("ctrl: %s %s: nil object", verb, c.b.Type)
	}
	return nil
}

// Create creates obj and returns the object the server stored.
func (c *Client[T]) Create(ctx context.Context, obj T) (T, error) {
	if err := c.checkNil("create", obj); err != nil {
		return obj, err
	}
	key := KeyOf(obj)
	out, err := c.write(key, false, func() (T, error) {
		return c.b.Create(ctx, obj, metav1.CreateOptions{FieldManager: c.m.opts.FieldManager})
	})
	return out, c.wrap("create", key, err)
}

// Update replaces obj. The resourceVersion of obj is a precondition: if the
// object changed since it was read, the error is a conflict
// (apierrors.IsConflict), and the usual answer is to return it from
// reconcile, which retries with the latest object.
func (c *Client[T]) Update(ctx context.Context, obj T) (T, error) {
	if err := c.checkNil("update", obj); err != nil {
		return obj, err
	}
	key := KeyOf(obj)
	out, err := c.write(key, false, func() (T, error) {
		return c.b.Update(ctx, obj, metav1.UpdateOptions{FieldManager: c.m.opts.FieldManager})
	})
	return out, c.wrap("update", key, err)
}

// UpdateStatus replaces the status of obj through the status subresource:
// the server ignores every other change in obj. Like Update, it fails with a
// conflict if the object changed since it was read.
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	if err := c.checkNil("update status of", obj); err != nil {
		return obj, err
	}
	key := KeyOf(obj)
	if !c.b.Status {
		return obj, fmt.Errorf("ctrl: update status of %s %s: the resource has no status subresource", c.b.Type, key)
	}
	out, err := c.write(key, false, func() (T, error) {
		return c.b.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.m.opts.FieldManager})
	})
	return out, c.wrap("update status of", key, err)
}

// Patch applies a patch to the object with key and returns the result. pt
// is types.MergePatchType, types.JSONPatchType, or, for built-in types only,
// types.StrategicMergePatchType. For server-side apply use [Client.Apply].
func (c *Client[T]) Patch(ctx context.Context, key Key, pt types.PatchType, data []byte) (T, error) {
	return c.patch(ctx, key, pt, data, "")
}

// PatchStatus is [Client.Patch] on the status subresource.
func (c *Client[T]) PatchStatus(ctx context.Context, key Key, pt types.PatchType, data []byte) (T, error) {
	return c.patch(ctx, key, pt, data, "status")
}

func (c *Client[T]) patch(ctx context.Context, key Key, pt types.PatchType, data []byte, sub string) (T, error) {
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
		return binding.New[T](), fmt.Errorf("ctrl: %s %s %s: the resource has no status subresource", verb, c.b.Type, key)
	}
	var subs []string
	if sub != "" {
		subs = []string{sub}
	}
	out, err := c.write(key, false, func() (T, error) {
		return c.b.Patch(ctx, key.Namespace, key.Name, pt, data, metav1.PatchOptions{FieldManager: c.m.opts.FieldManager}, subs...)
	})
	return out, c.wrap(verb, key, err)
}

// ApplyOptions configure [Client.Apply].
type ApplyOptions struct {
	// FieldManager owns the applied fields. Default: the manager's
	// Options.FieldManager.
	FieldManager string
	// Force takes ownership of fields other managers own instead of failing
	// with a conflict.
	Force bool
	// Status applies to the status subresource.
	Status bool
}

// Apply applies obj with server-side apply: the field manager comes to own
// exactly the fields set in obj, and the server merges them into the
// object, creating it if needed. Build obj with only the fields you mean to
// own: every field that is set, even to its zero value when the Go type does
// not omit it, is claimed.
func (c *Client[T]) Apply(ctx context.Context, obj T, opts ApplyOptions) (T, error) {
	if err := c.checkNil("apply", obj); err != nil {
		return obj, err
	}
	key := KeyOf(obj)
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
		subs = []string{"status"}
	}
	out, err := c.write(key, false, func() (T, error) {
		return c.b.Patch(ctx, key.Namespace, key.Name, types.ApplyPatchType, data, po, subs...)
	})
	return out, c.wrap("apply", key, err)
}

// Delete deletes the object with key. opts carries preconditions (UID,
// resourceVersion) and the propagation policy; the zero value is the
// server's default. An object with finalizers is only marked for deletion
// until they are removed.
func (c *Client[T]) Delete(ctx context.Context, key Key, opts metav1.DeleteOptions) error {
	_, err := c.write(key, true, func() (T, error) {
		return binding.New[T](), c.b.Delete(ctx, key.Namespace, key.Name, opts)
	})
	return c.wrap("delete", key, err)
}

// IgnoreNotFound returns nil for an error that means the object does not
// exist, and err otherwise.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func schemaGroup(apiVersion string) (string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return gv.Group, err
}

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// Resource says where the API server serves a custom resource type: its
// group, version and plural resource name, its kind, and its scope.
type Resource struct {
	Group    string // "example.com"
	Version  string // "v1"
	Resource string // the lower-case plural: "widgets"
	// Kind defaults to the name of the Go type.
	Kind       string
	Namespaced bool
}

// Register records that the API server serves the custom resource type T as
// r. T is a pointer to a struct that embeds metav1.TypeMeta and
// metav1.ObjectMeta with JSON tags like a generated type, and implements
// DeepCopyObject; nothing else is needed: no clientset, no scheme. Call it
// once, before creating managers that use T, for example in an init
// function. Registering T again with the same r does nothing; with another
// r, or for a built-in type, it returns an error.
func Register[T Object](r Resource) error {
	err := binding.Register(binding.Info{
		Type:       reflect.TypeFor[T](),
		GVR:        schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
		Kind:       r.Kind,
		Namespaced: r.Namespaced,
	})
	if err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}
