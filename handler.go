package ctrl

import "slices"

// A controller is the handler of its own cache: each change queues the
// changed object's key. While the controller is not active (before Start,
// or while another replica leads) changes are dropped, tombstones included:
// activation queues every cached object anyway.

func (c *Controller[T]) changed(ev event[T]) {
	if !c.active.Load() {
		return
	}
	cause := Cause{Kind: c.cache.kind, Object: ev.key}
	switch ev.kind {
	case added:
		cause.Reason = ReasonCreated
	case updated:
		if ev.obj.GetDeletionTimestamp() == nil && !passes(c.updatePass, ev.old, ev.obj, c.log) {
			return
		}
		cause.Reason = ReasonUpdated
	default:
		if !c.remember(ev) {
			return
		}
		cause.Reason = ReasonDeleted
	}
	c.q.add(ev.key, cause)
	c.mgr.activity.Add(1)
}

// listed queues the objects a list added or changed through the backlog.
func (c *Controller[T]) listed(evs []event[T]) {
	if !c.active.Load() {
		return
	}
	keys := make([]Key, len(evs))
	for i, ev := range evs {
		keys[i] = ev.key
	}
	c.q.addBacklog(batch{keys: keys, cause: Cause{Reason: ReasonListed, Kind: c.cache.kind}, self: true})
	c.mgr.activity.Add(1)
}

// tombstone is the last known state of an object that left the cache, and
// how it left.
type tombstone[T Object] struct {
	obj  T
	kind eventKind // deleted, left or vanished
}

// remember keeps a tombstone for a removal the controller must act on: a
// deletion for OnDelete, and an object that carried the controller's
// finalizer when it left. It reports whether the removal concerns the
// controller at all.
func (c *Controller[T]) remember(ev event[T]) bool {
	fin := c.finalizer != "" && slices.Contains(ev.obj.GetFinalizers(), c.finalizer)
	var keep bool
	switch ev.kind {
	case deleted:
		keep = c.onDelete != nil
	case left:
		keep = fin
	case vanished:
		keep = c.onDelete != nil || fin
	}
	if keep {
		c.mu.Lock()
		c.tombstones[ev.key] = tombstone[T]{ev.obj, ev.kind}
		c.mu.Unlock()
	}
	// A deletion is reconciled even without hooks: reconcile sees the key
	// of a gone object do nothing, but a new object with the same name,
	// created meanwhile, is reconciled.
	return keep || ev.kind == deleted
}

// target is a controller as the handlers of other caches see it.
type target interface {
	// queue queues key for cause, if the controller is active.
	queue(key Key, cause Cause)
	// queueListed queues keys through the backlog, if the controller is
	// active.
	queueListed(keys []Key, cause Cause)
	// queueAll queues every object of the controller through the backlog,
	// if it is active.
	queueAll(cause Cause)
}

func (c *Controller[T]) queue(key Key, cause Cause) {
	if !c.active.Load() {
		return
	}
	c.q.add(key, cause)
	c.mgr.activity.Add(1)
}

func (c *Controller[T]) queueListed(keys []Key, cause Cause) {
	if !c.active.Load() || len(keys) == 0 {
		return
	}
	c.q.addBacklog(batch{keys: keys, cause: cause})
	c.mgr.activity.Add(1)
}

// joined does nothing for the controller's own cache: the member's objects
// came through listed.
func (c *Controller[T]) joined(string) {}

// queueAll queues every object of the controller through the backlog.
func (c *Controller[T]) queueAll(cause Cause) {
	if !c.active.Load() {
		return
	}
	c.q.addBacklog(batch{keys: c.cache.keys(), cause: cause})
	c.mgr.activity.Add(1)
}
