package ctrl

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// finalizeStep adds the controller's finalizer to a live object, or runs the
// finalize hook and removes the finalizer from one being deleted. done
// reports that reconcile is not to be called; after adding the finalizer,
// reconcile goes on with the patched object, which *obj is set to. *obj is
// the reconcile's copy of cached, the cache's object when it began.
func (c *Controller[T]) finalizeStep(ctx context.Context, cached T, obj *T) (done bool, err error) {
	o := *obj
	has := slices.Contains(o.GetFinalizers(), c.finalizer)
	switch {
	case o.GetDeletionTimestamp() == nil && has:
		return false, nil
	case o.GetDeletionTimestamp() == nil:
		patched, err := c.setFinalizer(ctx, o, true)
		if err != nil {
			return true, err
		}
		*obj = patched
		return false, nil
	case !has:
		return true, nil // being deleted, and not waiting for us
	case !c.cache.holds(keyFrom(ctx, o), cached):
		// A write of ours, such as the removal of the finalizer by the
		// reconcile before this one, is not in the cache yet, or the
		// cache has moved past the state this reconcile read (that
		// removal, observed since): finalizing this older state would run
		// finalize again. The event queues the key (updates of objects
		// being deleted pass every filter, and deletions are always
		// queued).
		return true, nil
	}
	return true, c.runFinalizer(ctx, o)
}

// runFinalizer calls finalize on obj and removes the finalizer once it
// succeeds. A removal that finds the object gone succeeds. A removal that
// fails (a conflict, an outage) is retried without calling finalize again
// for the same object.
func (c *Controller[T]) runFinalizer(ctx context.Context, obj T) error {
	key := keyFrom(ctx, obj)
	c.mu.Lock()
	uid, done := c.finalized[key]
	done = done && uid == obj.GetUID()
	c.mu.Unlock()
	if !done {
		if err := c.finalize(ctx, obj); err != nil {
			return fmt.Errorf("finalize: %w", err)
		}
		c.mu.Lock()
		if c.finalized == nil {
			c.finalized = map[Key]types.UID{}
		}
		c.finalized[key] = obj.GetUID()
		c.mu.Unlock()
	}
	_, err := c.setFinalizer(ctx, obj, false)
	if err = IgnoreNotFound(err); err == nil {
		c.mu.Lock()
		delete(c.finalized, key)
		c.mu.Unlock()
	}
	return err
}

// setFinalizer adds or removes the controller's finalizer with a patch from
// obj that carries its resourceVersion: a concurrent change makes it fail
// with a conflict instead of dropping another controller's finalizer.
func (c *Controller[T]) setFinalizer(ctx context.Context, obj T, add bool) (T, error) {
	changed := obj.DeepCopyObject().(T)
	if add {
		changed.SetFinalizers(append(slices.Clone(obj.GetFinalizers()), c.finalizer))
	} else {
		changed.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == c.finalizer }))
	}
	return c.client.PatchFrom(ctx, obj, changed)
}

// bury hands the tombstone of key, if any, to the hook it was kept for:
// OnDelete for a deletion, the finalizer for an object that left the
// cache's selector carrying it. A removal the cache could not tell apart
// (the object vanished from a relist of a selective cache, a field
// selector this side cannot evaluate, or a sharded cache's label) is told
// apart by reading the server: an object that is still there and still in
// the user's selector but another replica's now was forgotten, not left,
// and no hook runs. On failure the tombstone stays for the retry, unless a
// newer one came.
func (c *Controller[T]) bury(ctx context.Context, key Key, cached T, inCache bool) error {
	c.mu.Lock()
	ts, had := c.tombstones[key]
	delete(c.tombstones, key)
	c.mu.Unlock()
	if !had || inCache && cached.GetUID() == ts.obj.GetUID() {
		return nil // nothing to do, or back in the cache: not gone
	}
	keep := func(err error) error {
		if !isTerminal(err) {
			c.mu.Lock()
			if _, newer := c.tombstones[key]; !newer {
				c.tombstones[key] = ts
			}
			c.mu.Unlock()
		}
		return err
	}
	kind, obj := ts.kind, ts.obj
	if kind != deleted {
		live, err := c.client.Uncached().Get(ctx, key)
		switch {
		case apierrors.IsNotFound(err):
			kind = deleted
		case err != nil:
			return keep(err)
		case live.GetUID() != ts.obj.GetUID():
			kind = deleted // and a new object took its name
		case !c.cache.serves(live):
			kind = forgotten
		default:
			kind, obj = left, live
		}
	}
	if kind == deleted || !slices.Contains(obj.GetFinalizers(), c.finalizer) {
		c.forgetFinalized(key) // nothing is left to finalize
	}
	switch {
	case kind == deleted && c.onDelete != nil:
		if err := c.onDelete(ctx, obj.DeepCopyObject().(T)); err != nil {
			return keep(fmt.Errorf("OnDelete: %w", err))
		}
	case kind == left && c.finalizer != "" && slices.Contains(obj.GetFinalizers(), c.finalizer):
		c.log.V(1).Info("object left the cache's selector carrying the finalizer: finalizing it", "object", key)
		if err := c.runFinalizer(ctx, obj); err != nil {
			return keep(err)
		}
	}
	return nil
}
