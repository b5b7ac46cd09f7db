package ctrl

import (
	"context"
	"fmt"
	"reflect"
	"slices"
)

// cacheRefs: a cache's identity, users, and stop. Under Manager.mu.
type cacheRefs struct {
	id       cacheID
	users    int
	pinned   bool // made by NewCache, or private to the manager
	released bool
	stop     context.CancelFunc // set when it starts
	done     chan struct{}      // closed when its run returns
}

func (r *cacheRefs) hold(pin bool) {
	if pin {
		r.pinned = true
	} else {
		r.users++
	}
}

func (c *Cache[T]) refsOf() *cacheRefs { return &c.refs }

// use counts one more user; it returns an error if the cache was released.
func (m *Manager) use(c managedCache) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := c.refsOf()
	if r.released {
		return fmt.Errorf("%s was released when its last user stopped; make it again", c.describe())
	}
	r.users++
	return nil
}

// unuse counts one user less; an unused unpinned cache is stopped and emptied.
func (m *Manager) unuse(c managedCache) {
	m.mu.Lock()
	r := c.refsOf()
	r.users--
	if r.users > 0 || r.pinned || r.released {
		m.mu.Unlock()
		return
	}
	r.released = true
	if m.caches[r.id] == c {
		delete(m.caches, r.id)
	}
	m.cacheList = slices.DeleteFunc(slices.Clone(m.cacheList), func(x managedCache) bool { return x == c })
	m.fleetCaches = slices.DeleteFunc(slices.Clone(m.fleetCaches), func(x fleetCache) bool { return any(x) == any(c) })
	stop, done := r.stop, r.done
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	c.release()
	m.log.V(1).Info("cache released: nothing uses it any more", "cache", c.describe())
	m.activity.Add(1)
}

// rekey files c under its new scope, unless another cache has it.
func (m *Manager) rekey(c managedCache, scope string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := c.refsOf()
	if m.caches[r.id] == c {
		delete(m.caches, r.id)
	}
	r.id.scope = scope
	if _, taken := m.caches[r.id]; !taken && !r.released {
		m.caches[r.id] = c
	}
}

// release empties a cache stopped for good, and lets an optional one's CRD cache go.
func (c *Cache[T]) release() {
	c.rewire.Lock()
	c.stopFeeds()
	c.rewire.Unlock()
	if c.share != nil {
		c.share.Release()
	}
	c.mu.Lock()
	c.items.Clear()
	c.mu.Unlock()
	c.markSynced() // nothing waits for a cache that will never list
	if o := c.opt; o != nil {
		c.mgr.metrics.WaitingForCRD.DeleteLabelValues(o.Name)
		select {
		case <-o.ready:
			c.mgr.unuse(o.crds)
		default:
		}
	}
}

// addLiveHandler registers h and hands it the cached objects as one list.
func (c *Cache[T]) addLiveHandler(h handler[T]) {
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.mu.Lock()
	c.handlers = append(slices.Clone(c.handlers), h)
	var evs []event[T]
	for k, obj := range c.items.All() {
		evs = append(evs, event[T]{kind: added, key: Key(k), obj: obj})
	}
	c.mu.Unlock()
	if len(evs) > 0 {
		c.startDispatching()
		defer c.doneDispatching()
		h.listed(evs)
	}
}

func (c *Cache[T]) copyIndexes(to *Cache[T]) {
	c.mu.RLock()
	fns := c.items.Indexes()
	c.mu.RUnlock()
	for name, fn := range fns {
		_ = to.AddIndex(name, fn) // one it has already stays
	}
}

// removeHandler unregisters h. Once it returns, h hears of no change.
func (c *Cache[T]) removeHandler(h handler[T]) {
	c.dispatch.Lock()
	defer c.dispatch.Unlock()
	c.mu.Lock()
	c.handlers = slices.DeleteFunc(slices.Clone(c.handlers), func(x handler[T]) bool { return x == h })
	c.mu.Unlock()
}

// link is an Owns or a Watches: a handler on another cache. Under the controller's mu.
type link struct {
	src    managedCache
	remove func() // takes the handler off src
	// follow, for Owns, moves to the new namespaces' cache and returns the old one.
	follow func(namespaces []string) managedCache
}

// Stop stops the controller for good, before or while the manager runs:
// its queue, [Owns] and [Watches] go, and unused caches (not [NewCache]'s)
// stop and forget their objects; stopped before Start, its name may be
// reused. It blocks until its reconciles returned or ctx is done, then
// cancels them and returns an error counting them. A second call returns
// nil. Safe for concurrent use.
func (c *Controller[T]) Stop(ctx context.Context) error {
	m := c.mgr
	c.wiring.Lock()
	// m.mu first, as Start takes it to prepare controllers.
	m.mu.Lock()
	c.mu.Lock()
	if c.removed.Load() {
		c.mu.Unlock()
		m.mu.Unlock()
		c.wiring.Unlock()
		return nil
	}
	c.removed.Store(true) // start, under c.mu too, starts no worker from now on
	c.active.Store(false)
	links, q := c.links, c.q
	c.links = nil
	c.mu.Unlock()
	if m.controllers[c.ctrlName] == managedController(c) {
		delete(m.controllers, c.ctrlName)
	}
	m.ctrlList = slices.DeleteFunc(slices.Clone(m.ctrlList), func(x managedController) bool { return x == managedController(c) })
	m.mu.Unlock()

	// Take the handlers off first, so that nothing is queued any more.
	c.cache.removeHandler(c)
	for _, l := range links {
		l.remove()
	}
	c.wiring.Unlock() // before releasing caches, whose namespaces may be changing
	err := c.halt(ctx, q)
	m.unuse(c.cache)
	for _, l := range links {
		m.unuse(l.src)
	}
	m.metrics.ForgetController(c.ctrlName)
	m.activity.Add(1)
	c.log.Info("controller stopped")
	return err
}

// halt stops q's workers, waits until ctx is done, then cancels running reconciles.
func (c *Controller[T]) halt(ctx context.Context, q *queue) error {
	if q == nil {
		return nil // never prepared: nothing runs
	}
	c.stopping.Store(true)
	c.stopOnce.Do(func() { close(c.stop) })
	q.ShutDown()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return fmt.Errorf("ctrl: %s: Stop: %d reconciles still running when %w; their context is canceled",
		c, q.Processing(), context.Cause(ctx))
}

// addLink records l, or takes its handler off again if the controller was stopped.
func (c *Controller[T]) addLink(l *link) error {
	c.mu.Lock()
	removed := c.removed.Load()
	if !removed {
		c.links = append(c.links, l)
	}
	c.mu.Unlock()
	if removed {
		l.remove()
		c.mgr.unuse(l.src)
		return fmt.Errorf("ctrl: %s: the controller was stopped", c)
	}
	return nil
}

// Unwatch removes c's [Owns] and [Watches] of the caches from, or of every
// cache of O; unused caches (not [NewCache]'s) then stop and forget their
// objects. O is given or inferred:
//
//	err := ctrl.Unwatch[*corev1.Secret](c)  // every Owns and Watches of Secrets
//	err = ctrl.Unwatch(c, nodes)             // the Watches of the cache nodes
//
// Callable before or while the manager runs, it blocks until released
// caches stopped; it returns an error if c has no such Owns or Watches.
func Unwatch[O, T Object](c *Controller[T], from ...*Cache[O]) error {
	c.wiring.Lock()
	c.mu.Lock()
	var gone, kept []*link
	for _, l := range c.links {
		if src, ok := l.src.(*Cache[O]); ok && (len(from) == 0 || slices.Contains(from, src)) {
			gone = append(gone, l)
		} else {
			kept = append(kept, l)
		}
	}
	c.links = kept
	c.mu.Unlock()
	for _, l := range gone {
		l.remove()
	}
	c.wiring.Unlock() // before releasing caches, whose namespaces may be changing
	if len(gone) == 0 {
		return fmt.Errorf("ctrl: %s: Unwatch: no Owns or Watches of %s", c, reflect.TypeFor[O]())
	}
	for _, l := range gone {
		c.mgr.unuse(l.src)
	}
	c.mgr.activity.Add(1)
	return nil
}

// rescoped moves the caches of the controller's Owns to its new namespaces.
func (c *Controller[T]) rescoped(namespaces []string) {
	if !c.cache.b.Namespaced {
		return
	}
	c.wiring.Lock()
	c.mu.Lock()
	links := slices.Clone(c.links)
	c.mu.Unlock()
	var left []managedCache
	for _, l := range links {
		if l.follow != nil {
			if old := l.follow(namespaces); old != nil {
				left = append(left, old)
			}
		}
	}
	c.wiring.Unlock()
	for _, old := range left {
		c.mgr.unuse(old)
	}
}
