package ctrl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/lostcreate"
	"github.com/typedctrl/ctrl/internal/mergepatch"
	"github.com/typedctrl/ctrl/internal/objects"
	"github.com/typedctrl/ctrl/internal/probe"
)

// write fences every Client write, tags an outage, and has WaitIdle track it.
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
	if err == nil && !deleting {
		stamp(obj, typeMetaOf(c.b.Info))
	}
	for _, d := range done {
		d(obj, deleting, err)
	}
	return obj, probe.Tag(ctx, key.Cluster, err)
}

func (c *Client[T]) checkNil(verb string, obj T) error {
	if v := reflect.ValueOf(obj); !v.IsValid() || v.IsNil() {
		return fmt.Errorf("ctrl: %s %s: nil object", verb, c.b.Type)
	}
	return nil
}

func (c *Client[T]) checkObject(verb string, obj T) error {
	if err := c.checkNil(verb, obj); err != nil {
		return err
	}
	if c.b.Namespaced && obj.GetNamespace() == "" {
		return fmt.Errorf("ctrl: %s %s %s: the resource is namespaced and the object has no namespace", verb, c.b.Type, KeyOf(obj))
	}
	return nil
}

// Create creates obj and returns the object the server stored. A named
// object carries the annotation ctrl.dev/create-id, unique to the request:
// a later Create through this manager that finds its own lost create
// returns the object; anyone else's, other replicas' included, is
// AlreadyExists. A create with generateName may create twice. A create
// carries no resourceVersion to check: its fence against a replica that
// lost leadership is the check before it is sent, alone (see One leader).
func (c *Client[T]) Create(ctx context.Context, obj T) (T, error) {
	if err := c.checkObject("create", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	var id string
	if key.Name != "" {
		obj, id = lostcreate.Stamp(obj)
	}
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Create(ctx, obj, metav1.CreateOptions{FieldManager: c.m.opts.FieldManager})
	})
	if key.Name != "" {
		get := func(ctx context.Context) (metav1.Object, error) {
			b, err := c.backend(key.Cluster)
			if err != nil {
				return nil, err
			}
			return b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
		}
		if mine, ok := c.m.lostCreates.Settle(ctx, c.b, key, id, err, get); ok {
			return mine.(T), nil
		}
	}
	return out, c.wrap("create", key, err)
}

// Update replaces obj, with obj's resourceVersion as a precondition: if the
// object changed since it was read, the error is a conflict
// (apierrors.IsConflict); return it from reconcile to retry (Fresh).
func (c *Client[T]) Update(ctx context.Context, obj T) (T, error) {
	if err := c.checkObject("update", obj); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(obj))
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return b.Update(ctx, obj, metav1.UpdateOptions{FieldManager: c.m.opts.FieldManager})
	})
	c.failed(key, obj, err)
	return out, c.wrap("update", key, err)
}

// UpdateStatus replaces obj's status through the status subresource,
// failing with a conflict as Update does, or at once if the resource has
// none (APIResource.Status).
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
	c.failed(key, obj, err)
	return out, c.wrap("update status of", key, err)
}

func (c *Client[T]) noStatus() error {
	switch {
	case c.b.Builtin:
		return errors.New("the resource has no status subresource")
	case c.b.StatusUnknown: // the fakes' default
		return errors.New("the resource has no status subresource on the fakes, since the type has no status field: set APIResource.Status to have one")
	}
	return errors.New("the resource has no status subresource: its CustomResourceDefinition has no `subresources: {status: {}}`")
}

// Patch applies a patch to the object with key and returns the result. pt
// is types.MergePatchType, types.JSONPatchType, or, for built-in types only,
// types.StrategicMergePatchType (server-side apply: [Client.Apply]).
//
// In a reconcile under a Lease, a patch naming no resourceVersion is fenced
// by the one the manager knows (One leader); a conflict this alone causes
// is retried, not returned. Apply, and Delete without preconditions, too.
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
	if err := c.checkKey(verb, key); err != nil {
		return binding.New[T](), err
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
		return c.fenced(ctx, b, key, func(rv string) (T, bool, error) {
			data, ok := leader.Precondition(pt, data, rv)
			out, err := b.Patch(ctx, key.Namespace, key.Name, pt, data, metav1.PatchOptions{FieldManager: c.m.opts.FieldManager}, subs...)
			return out, ok, err
		})
	})
	return out, c.wrap(verb, key, err)
}

// fenced sends a write made under a term with the newest resourceVersion
// known as a precondition, where the caller set none (send reports whether
// it carried rv): the term's check cannot cover a pause before the wire. A
// conflict it alone causes is retried, the term checked again, at the
// server's version. Without a term, on the fakes, or with no version
// known, the write goes as the caller made it.
func (c *Client[T]) fenced(ctx context.Context, b binding.Backend[T], key Key, send func(rv string) (T, bool, error)) (T, error) {
	rv := ""
	if leader.Holds(ctx) && !b.Fake() {
		for _, cc := range cachesOf(c.m, c.b) {
			if v := cc.version(key); v != "" && (rv == "" || objects.Newer(v, rv)) {
				rv = v
			}
		}
	}
	for tries := 1; ; tries++ {
		out, carried, err := send(rv)
		if !carried || !leader.Refused(err) || tries == 5 {
			return out, err
		}
		if err := leader.Check(ctx); err != nil {
			return out, err
		}
		cur, gerr := b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
		switch {
		case gerr != nil:
			return out, gerr
		case cur.GetResourceVersion() == rv:
			return out, err // the version it carried is current: the refusal is the write's own
		}
		rv = cur.GetResourceVersion()
	}
}

// PatchFrom writes the changes that turned old into obj as a JSON merge
// patch carrying old's resourceVersion: a change since old was read is a
// conflict, never overwritten. Lists are replaced whole; status changes are
// ignored where there is a status subresource. With nothing changed it
// makes no request and returns obj.
func (c *Client[T]) PatchFrom(ctx context.Context, old, obj T) (T, error) {
	if err := errors.Join(c.checkNil("patch", old), c.checkNil("patch", obj)); err != nil {
		return obj, err
	}
	key := c.at(KeyOf(old))
	if KeyOf(obj) != KeyOf(old) {
		return obj, fmt.Errorf("ctrl: patch %s %s: the changed object is %s", c.b.Type, key, KeyOf(obj))
	}
	patch, err := mergepatch.Between(old, obj)
	if err != nil {
		return obj, c.wrap("patch", key, err)
	}
	if patch == nil {
		return obj, nil
	}
	out, err := c.patch(ctx, key, types.MergePatchType, patch, "")
	c.failed(key, obj, err)
	return out, err
}

// failed tells the type's caches that a write of obj failed: obj may be a
// cache's own object, changed in place, and the change must not outlive
// the failure (Cache.suspect).
func (c *Client[T]) failed(key Key, obj T, err error) {
	if err != nil {
		for _, cc := range cachesOf(c.m, c.b) {
			cc.suspect(key, obj)
		}
	}
}

// ApplyParams configure [Client.Apply].
type ApplyParams struct {
	// FieldManager owns the applied fields. Default: the manager's
	// Options.FieldManager.
	FieldManager string
	// Force takes ownership of fields other managers own instead of failing
	// with a conflict. Default: off.
	Force bool
	// Status applies to the status subresource. Default: off.
	Status bool
}

// Apply applies obj with server-side apply, creating it if needed: the
// field manager comes to own exactly the fields set in obj, even to zero
// values the Go type does not omit. Set only the fields you mean to own.
func (c *Client[T]) Apply(ctx context.Context, obj T, opts ApplyParams) (T, error) {
	if err := c.checkObject("apply", obj); err != nil {
		return obj, err
	}
	key, given := c.at(KeyOf(obj)), obj
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
	mine := obj.GetResourceVersion() != ""
	out, err := c.write(ctx, key, false, func(b binding.Backend[T]) (T, error) {
		return c.fenced(ctx, b, key, func(rv string) (T, bool, error) {
			data, carried := data, rv != "" && !mine
			if carried {
				obj.SetResourceVersion(rv)
				var err error
				if data, err = json.Marshal(obj); err != nil {
					return obj, false, err
				}
			}
			out, err := b.Patch(ctx, key.Namespace, key.Name, types.ApplyPatchType, data, po, subs...)
			return out, carried, err
		})
	})
	c.failed(key, given, err)
	return out, c.wrap("apply", key, err)
}

// Delete deletes the object with key. opts, at most one, carries
// preconditions and the propagation policy. An object with finalizers is
// only marked for deletion: Delete returns nil and the object stays until
// they are removed.
func (c *Client[T]) Delete(ctx context.Context, key Key, opts ...metav1.DeleteOptions) error {
	key = c.at(key)
	if err := c.checkKey("delete", key); err != nil {
		return err
	}
	if len(opts) > 1 {
		return fmt.Errorf("ctrl: delete %s %s: %d DeleteOptions, want at most one", c.b.Type, key, len(opts))
	}
	var o metav1.DeleteOptions
	if len(opts) == 1 {
		o = opts[0]
	}
	_, err := c.write(ctx, key, true, func(b binding.Backend[T]) (T, error) {
		return c.fenced(ctx, b, key, func(rv string) (T, bool, error) {
			o := o
			if rv == "" || o.Preconditions != nil {
				return binding.New[T](), false, b.Delete(ctx, key.Namespace, key.Name, o)
			}
			o.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
			return binding.New[T](), true, b.Delete(ctx, key.Namespace, key.Name, o)
		})
	})
	return c.wrap("delete", key, err)
}
