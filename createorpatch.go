package ctrl

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/mergepatch"
)

// Outcome says what [Client.CreateOrPatch] did.
type Outcome string

// The outcomes of CreateOrPatch. Patched: the object was patched (and its
// status, if changed); StatusPatched: only the status subresource was.
const (
	Unchanged     Outcome = "unchanged"
	Created       Outcome = "created"
	Patched       Outcome = "patched"
	StatusPatched Outcome = "statusPatched"
)

// CreateOrPatch has mutate change a copy of the cached object, or a new one
// with only name and namespace set (which mutate must keep); it creates a
// new object, patches a changed one with [Client.PatchFrom], then a changed
// status subresource (not on create), and leaves an unchanged one alone.
// It returns the object as written and the outcome; if only the status
// patch fails, the patched object, Patched and the error. Without a cache
// covering key it reads the server. A create that finds the object already
// there patches the server's object, calling mutate again on it.
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
	cur, _, err := reader.read(ctx, key) // patchExisting copies it
	if apierrors.IsNotFound(err) {
		obj := binding.New[T]()
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		if err := c.mutate(key, obj, mutate); err != nil {
			return obj, Unchanged, err
		}
		out, err := c.InCluster(key.Cluster).Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			// Often this program's own create, not yet in the cache.
			if cur, err = c.Uncached().Get(ctx, key); err != nil {
				return obj, Unchanged, err
			}
			return c.patchExisting(ctx, key, cur, mutate)
		}
		if err != nil {
			return obj, Unchanged, err
		}
		return out, Created, nil
	}
	if err != nil {
		return cur, Unchanged, err
	}
	return c.patchExisting(ctx, key, cur, mutate)
}

// patchExisting is CreateOrPatch for an object read as cur, maybe the
// cache's own: what it returns is a copy, or what the server sent.
func (c *Client[T]) patchExisting(ctx context.Context, key Key, cur T, mutate func(T) error) (T, Outcome, error) {
	changed := cur.DeepCopyObject().(T)
	if err := c.mutate(key, changed, mutate); err != nil {
		return changed, Unchanged, err
	}
	if !c.b.Status {
		patch, err := mergepatch.Between(cur, changed)
		if err != nil || patch == nil {
			return changed, Unchanged, c.wrap("patch", key, err)
		}
		out, err := c.patch(ctx, key, types.MergePatchType, patch, "")
		if err != nil {
			return changed, Unchanged, err
		}
		return out, Patched, nil
	}
	rest, status, err := mergepatch.Split(cur, changed)
	if err != nil {
		return changed, Unchanged, c.wrap("patch", key, err)
	}
	out, op := changed, Unchanged
	if rest != nil {
		patch, err := mergepatch.WithResourceVersion(rest, cur.GetResourceVersion())
		if err != nil {
			return changed, Unchanged, c.wrap("patch", key, err)
		}
		if out, err = c.patch(ctx, key, types.MergePatchType, patch, ""); err != nil {
			return changed, Unchanged, err
		}
		op = Patched
	}
	if status != nil {
		// Against the version the object's own patch wrote.
		patch, err := mergepatch.WithResourceVersion(status, out.GetResourceVersion())
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
