package ctrl

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Outcome says what [Client.CreateOrPatch] did.
type Outcome string

// The outcomes of CreateOrPatch. Patched means the object was patched, and
// its status too if mutate changed it; StatusPatched means only the status
// changed, and only the status subresource was patched.
const (
	Unchanged     Outcome = "unchanged"
	Created       Outcome = "created"
	Patched       Outcome = "patched"
	StatusPatched Outcome = "statusPatched"
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
func (c *Client[T]) CreateOrPatch(ctx context.Context, key Key, mutate func(obj T) error) (T, Outcome, error) {
	key = c.at(key)
	if err := c.checkKey("create or patch", key); err != nil {
		return binding.New[T](), Unchanged, err
	}
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
