package ctrl

import (
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/internal/objects"
	"github.com/typedctrl/ctrl/internal/scope"
	"k8s.io/client-go/tools/cache"
)

// A feed is its reflector's store: changes apply under the lock, then go
// to the handlers on the reflector's goroutine, with no queue between.

// Transformer prepares a streamed list's objects as they arrive, so full objects
// and managedFields never accumulate.
func (f *feed[T]) Transformer() cache.TransformFunc {
	c := f.c
	c.mu.RLock()
	fn := c.transform
	c.mu.RUnlock()
	if fn == nil && f.b.Project == nil {
		return nil
	}
	return func(obj any) (any, error) {
		if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return obj, nil
		}
		return f.prepare(obj)
	}
}

// prepare projects, stamps and transforms; an object may be prepared twice.
func (f *feed[T]) prepare(obj any) (T, error) {
	t, ok := obj.(T)
	if ok && f.c.transform != nil && f.b.Fake() {
		// A fake shares one object among several caches' watches.
		t = t.DeepCopyObject().(T)
	}
	if !ok && f.b.Project != nil {
		t, ok = f.b.Project(obj)
	}
	if !ok {
		return t, fmt.Errorf("ctrl: %s received %T", f.c, obj)
	}
	stamp(t, f.c.typeMeta)
	if f.c.transform != nil {
		t = f.c.transform(t)
	}
	return t, nil
}

func (f *feed[T]) Add(obj any) error { return f.Update(obj) }

func (f *feed[T]) Update(obj any) error {
	t, err := f.prepare(obj)
	if err != nil {
		return err
	}
	c := f.c
	if c.scope.Selects(t) == scope.NotSelected { // fakes ignore selectors on watches
		f.remove(t, left)
		return nil
	}
	if !c.serves(t) { // not this replica's: moved away, or a server that ignored the selection
		f.remove(t, forgotten)
		return nil
	}
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.startDispatching()
	defer c.doneDispatching()
	key := KeyOf(t).InCluster(f.key.cluster)
	c.mu.Lock()
	f.lastRV = t.GetResourceVersion()
	f.lastEvent.Store(time.Now().UnixNano())
	old, existed := c.items.Set(objects.Key(key), t)
	c.items.Observe(objects.Key(key), t, true, f.b.Fake())
	c.mu.Unlock()
	ev := event[T]{kind: added, key: key, obj: t, inline: f.offer()}
	if existed {
		ev = event[T]{kind: updated, key: key, old: old, obj: t, inline: ev.inline}
	}
	for _, h := range c.handlers {
		h.changed(ev)
	}
	return nil
}

// Delete removes an object. In a selective cache it may have only left the
// selector; the controller tells them apart (Controller.bury).
func (f *feed[T]) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, err := f.prepare(obj)
	if err != nil {
		return err
	}
	kind := deleted
	switch {
	case !f.c.serves(t):
		kind = forgotten
	case f.c.scope.Selects(t) == scope.NotSelected:
		kind = left
	case f.c.selective():
		kind = vanished
	}
	f.remove(t, kind)
	return nil
}

func (f *feed[T]) remove(t T, kind eventKind) {
	c := f.c
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.startDispatching()
	defer c.doneDispatching()
	key := KeyOf(t).InCluster(f.key.cluster)
	c.mu.Lock()
	f.lastRV = t.GetResourceVersion()
	f.lastEvent.Store(time.Now().UnixNano())
	_, existed := c.items.Remove(objects.Key(key))
	// Any removal settles a wait for the object's removal or deletion.
	e, _ := c.items.Expecting(objects.Key(key))
	c.items.Observe(objects.Key(key), t, kind != deleted && !e.Gone && !e.Deleting, f.b.Fake())
	c.mu.Unlock()
	if existed {
		ev := event[T]{kind: kind, key: key, obj: t, inline: f.offer()}
		for _, h := range c.handlers {
			h.changed(ev)
		}
	}
}

// drop removes the matching objects as removals of kind, which no watch reports.
func (c *Cache[T]) drop(kind eventKind, match func(Key) bool) {
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.startDispatching()
	defer c.doneDispatching()
	var removed []event[T]
	c.mu.Lock()
	for k, obj := range c.items.All() {
		if match(Key(k)) {
			removed = append(removed, event[T]{kind: kind, key: Key(k), obj: obj})
		}
	}
	for _, ev := range removed {
		c.items.Remove(objects.Key(ev.key))
	}
	c.items.Forget(func(k objects.Key) bool { return match(Key(k)) }) // no event will settle them now
	c.mu.Unlock()
	for _, h := range c.handlers {
		for _, ev := range removed {
			h.changed(ev)
		}
	}
}

// Replace installs a complete list of the feed's namespace. Unchanged
// objects produce no event; missing ones are removed in their last state.
func (f *feed[T]) Replace(list []any, rv string) error {
	c := f.c
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.startDispatching()
	defer c.doneDispatching()
	listed := make(map[Key]T, len(list))
	for _, obj := range list {
		t, err := f.prepare(obj)
		if err != nil {
			return err
		}
		if c.scope.Selects(t) != scope.NotSelected && c.serves(t) {
			listed[KeyOf(t).InCluster(f.key.cluster)] = t
		}
	}
	var changes, removed []event[T]
	// Missing from a selective relist: deleted, or out of the selector.
	gone := deleted
	if c.selective() {
		gone = vanished
	}
	c.mu.Lock()
	f.lastRV = rv
	f.lastEvent.Store(time.Now().UnixNano())
	for k, obj := range listed {
		old, existed := c.items.Get(objects.Key(k))
		switch {
		case !existed:
			changes = append(changes, event[T]{kind: added, key: k, obj: obj})
		case old.GetResourceVersion() != obj.GetResourceVersion() || old.GetResourceVersion() == "":
			changes = append(changes, event[T]{kind: updated, key: k, old: old, obj: obj})
		default:
			continue // keep the instance readers may hold
		}
		c.items.Set(objects.Key(k), obj)
		c.items.Observe(objects.Key(k), obj, true, f.b.Fake())
	}
	var missing []Key
	for k := range c.items.In(f.key.cluster, f.key.namespace) { // the feed's own objects
		if _, ok := listed[Key(k)]; !ok {
			missing = append(missing, Key(k))
		}
	}
	for _, k := range missing {
		old, _ := c.items.Remove(objects.Key(k))
		kind := gone
		if !c.serves(old) {
			kind = forgotten // its part of the space is another replica's now
		}
		removed = append(removed, event[T]{kind: kind, key: k, obj: old})
		c.items.Observe(objects.Key(k), old, false, f.b.Fake())
	}
	c.settlePassed()
	c.mu.Unlock()
	for _, h := range c.handlers {
		if len(changes) > 0 {
			h.listed(changes)
		}
		for _, ev := range removed {
			h.changed(ev)
		}
	}
	if !f.isSynced.Load() && f.key.cluster != "" {
		for _, h := range c.handlers {
			h.changed(event[T]{kind: joined, key: Key{Cluster: f.key.cluster}})
		}
	}
	if f.isSynced.Load() && f.relists != nil {
		f.relists.Inc()
		c.log.V(1).Info("relisted", "cluster", f.key.cluster, "namespace", f.key.namespace, "changed", len(changes), "removed", len(removed))
	} else if !f.b.Fake() {
		f.markSynced()
	}
	return nil
}

// Resync does nothing: controllers resync on their own timers
// (ControllerOptions.ResyncPeriod), through their backlogs.
func (f *feed[T]) Resync() error { return nil }

// Bookmark and UpdateResourceVersion record how far the watch has seen, so
// writes it will never see are not waited for past it; a bookmark also
// settles passed expectations, for programs that never call WaitIdle.
func (f *feed[T]) Bookmark(rv string) error {
	f.UpdateResourceVersion(rv)
	f.c.mu.Lock()
	f.c.settlePassed()
	f.c.mu.Unlock()
	return nil
}

func (f *feed[T]) UpdateResourceVersion(rv string) {
	f.c.mu.Lock()
	f.lastRV = rv
	f.lastEvent.Store(time.Now().UnixNano())
	f.c.mu.Unlock()
}

// startDispatching marks an event being dispatched. The idle check reads
// marks, expectations and queues one after another: the activity counted
// here voids a check that read the mark before the event and the rest
// after it settled a write but before a handler queued its key.
func (c *Cache[T]) startDispatching() {
	c.dispatching.Add(1)
	c.mgr.activity.Add(1)
}

func (c *Cache[T]) doneDispatching() {
	c.dispatching.Add(-1)
	c.mgr.activity.Add(1)
}
