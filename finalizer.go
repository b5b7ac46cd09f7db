package ctrl

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// finalizeStep adds the finalizer or finalizes; unless done, *obj is patched.
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
		// Our own write is not cached yet, or the cache moved on: finalizing
		// now could run finalize again. Its event queues the key.
		return true, nil
	}
	return true, c.runFinalizer(ctx, o)
}

// runFinalizer finalizes, then removes the finalizer (gone counts); a failed
// removal is retried without finalizing the same object again.
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

// setFinalizer patches with obj's resourceVersion: never drops another's finalizer.
func (c *Controller[T]) setFinalizer(ctx context.Context, obj T, add bool) (T, error) {
	changed := obj.DeepCopyObject().(T)
	if add {
		changed.SetFinalizers(append(slices.Clone(obj.GetFinalizers()), c.finalizer))
	} else {
		changed.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == c.finalizer }))
	}
	return c.client.PatchFrom(ctx, obj, changed)
}

// bury hands key's tombstone to its hook (OnDelete, or the finalizer of an
// object that left with it), reading the server to classify a vanished
// one. On failure the tombstone stays for the retry, unless a newer came.
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
		if err := c.lend(key, obj, func(obj T) error { return c.onDelete(ctx, obj) }); err != nil {
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
