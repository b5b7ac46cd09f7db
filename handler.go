package ctrl

import "slices"

// A controller is the handler of its own cache. While it is not active
// (before Start, or while another replica leads) changes are dropped,
// tombstones included: activation queues every cached object anyway.

// changed is the one place that decides which changes of the controller's
// own objects reach its queue: every addition; an update that passes the
// filters, that a reconcile waits for (awaitOwnWrite), or of an object
// being deleted; a removal a hook must hear of (see remember).
func (c *Controller[T]) changed(ev event[T]) {
	if ev.kind == joined {
		return // the member's objects come through listed
	}
	if ev.kind != added && ev.kind != updated {
		c.forgetKey(ev.key, ev.kind)
	}
	if !c.active.Load() {
		return
	}
	cause := Cause{Kind: c.cache.kind, Object: ev.key}
	switch ev.kind {
	case added:
		cause.Trigger = TriggerCreated
	case updated:
		held, waited := c.awaited(ev.key)
		if ev.obj.GetDeletionTimestamp() == nil && !waited && !passes(c.updatePass, ev.old, ev.obj, c.log) {
			return
		}
		if held != nil {
			c.q.Merge(ev.key, held) // the causes of the reconcile that waited
		}
		cause.Trigger = TriggerUpdated
	default:
		if !c.remember(ev) {
			return
		}
		cause.Trigger = TriggerDeleted
	}
	c.add(ev, cause)
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
	c.q.AddBacklog(batch{Keys: keys, Cause: Cause{Trigger: TriggerListed, Kind: c.cache.kind}, Self: true})
	c.mgr.activity.Add(1)
}

// awaitOwnWrite reports whether the cache lacks a write this program made
// to key: then the update that brings it queues the key, with causes,
// whatever the filters say (Fresh). The cache is asked again once the key
// is marked, so that an update arriving in between is not missed.
func (c *Controller[T]) awaitOwnWrite(key Key, causes *Causes) bool {
	if !c.cache.pending(key) {
		if held, _ := c.awaited(key); held != nil {
			causes.merge(held) // of an earlier wait that no update ended
		}
		return false
	}
	c.mu.Lock()
	if c.awaiting == nil {
		c.awaiting = map[Key]*Causes{}
	}
	if _, ok := c.awaiting[key]; !ok {
		c.awaiting[key] = nil
		c.nAwaiting.Add(1)
	}
	c.mu.Unlock()
	if !c.cache.pending(key) { // the write arrived meanwhile
		if held, _ := c.awaited(key); held != nil {
			causes.merge(held)
		}
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held, ok := c.awaiting[key]
	if !ok {
		return false // the write arrived meanwhile, and queued the key again
	}
	if held == nil {
		held = &Causes{}
		c.awaiting[key] = held
	}
	held.merge(causes) // handed to the queue with the update that ends the wait
	return true
}

// awaited clears key's awaitOwnWrite mark, returning the waiters' causes.
func (c *Controller[T]) awaited(key Key) (*Causes, bool) {
	if c.nAwaiting.Load() == 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held, ok := c.awaiting[key]
	if ok {
		delete(c.awaiting, key)
		c.nAwaiting.Add(-1)
	}
	return held, ok
}

// forgetKey bounds the per-key maps by the objects that exist; what
// finalize did is kept for an object that may still exist (left, vanished).
func (c *Controller[T]) forgetKey(key Key, kind eventKind) {
	c.awaited(key)
	if kind == deleted {
		c.forgetFinalized(key)
	}
}

func (c *Controller[T]) forgetFinalized(key Key) {
	if c.finalizer == "" {
		return
	}
	c.mu.Lock()
	delete(c.finalized, key)
	c.mu.Unlock()
}

// tombstone is an object's last known state when it left, and how it left.
type tombstone[T Object] struct {
	obj  T
	kind eventKind // deleted, left or vanished
}

// remember keeps a tombstone for a removal the controller must act on (a
// deletion for OnDelete, an object that left with the finalizer) and
// reports whether the removal concerns the controller. Every reason an
// object leaves a cache is weighed here: hooks run for these tombstones only.
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
	case forgotten:
		// Out of reach: no hook; its finalizer stays for whoever holds it next.
		return false
	}
	if keep {
		c.mu.Lock()
		c.tombstones[ev.key] = tombstone[T]{ev.obj, ev.kind}
		c.mu.Unlock()
	}
	// A deletion is queued even without hooks, for a new object of its name.
	return keep || ev.kind == deleted
}

// target is a controller as the handlers of other caches see it.
type target interface {
	// Each queues only if active; Listed and All go through the backlog.
	enqueue(key Key, cause Cause)
	enqueueListed(keys []Key, cause Cause)
	enqueueAll(cause Cause)
	name() string
}

// user names the controller a handler serves, for a CRD-waiting cache's reports.
type user interface{ user() string }

func (c *Controller[T]) user() string { return c.ctrlName }

func (c *Controller[T]) enqueue(key Key, cause Cause) {
	if !c.active.Load() {
		return
	}
	c.q.Add(key, cause)
	c.mgr.activity.Add(1)
}

func (c *Controller[T]) enqueueListed(keys []Key, cause Cause) {
	if !c.active.Load() || len(keys) == 0 {
		return
	}
	c.q.AddBacklog(batch{Keys: keys, Cause: cause})
	c.mgr.activity.Add(1)
}

func (c *Controller[T]) enqueueAll(cause Cause) {
	if !c.active.Load() {
		return
	}
	c.q.AddBacklog(batch{Keys: c.cache.keys(), Cause: cause})
	c.mgr.activity.Add(1)
}

// add queues key with cause, or leaves it to reconcile inline if the event
// offers that, the controller's reconciles are short, and the queue hands
// it out at once.
func (c *Controller[T]) add(ev event[T], cause Cause) {
	in := ev.inline
	if in == nil || in.to != nil || !c.pace.Inline() { // none offered, another controller took it, or too slow
		c.q.Add(ev.key, cause)
		return
	}
	if key, item, ok := c.q.AddAndTake(ev.key, cause); ok {
		*in = inlineRun{to: c, key: key, item: item}
	}
}
