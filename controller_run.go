package ctrl

import (
	"context"
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/internal/shared"
)

// The methods in this file implement managedController.

func (c *Controller[T]) name() string { return c.ctrlName }

func (c *Controller[T]) waitingClusters() []string { return c.q.WaitingClusters() }

// forget drops what is kept of a member that left (its objects were not
// deleted); keys of other clusters that waited for its server are retried.
func (c *Controller[T]) forget(cluster string) {
	c.mu.Lock()
	for k := range c.tombstones {
		if k.Cluster == cluster {
			delete(c.tombstones, k)
		}
	}
	for k := range c.finalized {
		if k.Cluster == cluster {
			delete(c.finalized, k)
		}
	}
	for k := range c.awaiting {
		if k.Cluster == cluster {
			delete(c.awaiting, k)
			c.nAwaiting.Add(-1)
		}
	}
	q := c.q // nil before Start; prepare sets it under c.mu
	c.mu.Unlock()
	c.failures.Forget(func(k Key) bool { return k.Cluster == cluster })
	if q != nil {
		c.metrics.Waiting.Sub(float64(q.DropWaiting(cluster)))
		c.releaseWaiting(cluster)
	}
}

// prepare freezes the wiring and creates the queue, before the caches start.
func (c *Controller[T]) prepare() {
	q := newQueue(c.ctrlName, c.opts.Workers, c.mgr.memberCount, c.opts.RateLimiter, c.mgr.metrics.Queue(), &c.mgr.activity)
	if shared.InTest() { // asked now: a manager built at package initialization precedes testing's flags
		c.checks.Every = 1
	}
	c.mu.Lock()
	c.wired = true
	c.q = q
	c.stop = make(chan struct{})
	c.mu.Unlock()
}

// start waits for the controller's caches to sync, then activates it,
// queues every cached object, and starts the workers under reconcileCtx,
// without blocking: a cache the server forbids to list holds up its own
// controllers only. Called on each takeover too.
func (c *Controller[T]) start(reconcileCtx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed.Load() {
		return // stopped by Stop
	}
	if c.cancel != nil {
		c.cancel() // the last term's, over already
	}
	reconcileCtx, c.cancel = context.WithCancel(reconcileCtx)
	c.reconcileCtx.Store(&reconcileCtx)
	caches := c.cachesLocked()
	if unsynced(caches) == "" {
		c.activateLocked(reconcileCtx) // the usual case: every cache has synced
		return
	}
	c.wg.Go(func() {
		for _, cc := range caches {
			select {
			case <-cc.syncedChan():
			case <-c.stop:
				return
			case <-reconcileCtx.Done():
				return // the term ended first
			}
		}
		c.activate(reconcileCtx)
	})
}

// cachesLocked returns the controller's caches, its links' included; c.mu held.
func (c *Controller[T]) cachesLocked() []managedCache {
	caches := []managedCache{c.cache}
	for _, l := range c.links {
		caches = append(caches, l.src)
	}
	return caches
}

// waitingFor names a cache of the controller that has not synced, and why.
func (c *Controller[T]) waitingFor() string {
	c.mu.Lock()
	caches := c.cachesLocked()
	c.mu.Unlock()
	return unsynced(caches)
}

// unsynced names the first of caches that has not synced, and why.
func unsynced(caches []managedCache) string {
	for _, cc := range caches {
		select {
		case <-cc.syncedChan():
		default:
			return cc.describe() + ": " + cc.notReady()
		}
	}
	return ""
}

// activate runs the controller for reconcileCtx's term, unless it ended
// (pause deactivates under the same lock).
func (c *Controller[T]) activate(reconcileCtx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.activateLocked(reconcileCtx)
}

func (c *Controller[T]) activateLocked(reconcileCtx context.Context) {
	if reconcileCtx.Err() != nil || c.stopping.Load() || c.removed.Load() {
		return
	}
	// Activate first: a change dispatched from now on is queued, and one
	// dispatched before is in the cache, so in the list below.
	c.active.Store(true)
	c.q.AddBacklog(batch{Keys: c.cache.keys(), Cause: Cause{Trigger: TriggerListed, Kind: c.cache.kind}, Self: true})
	c.mgr.activity.Add(1)
	c.startOnce.Do(func() {
		for range c.opts.Workers {
			c.wg.Go(c.work)
		}
		if d := c.opts.ResyncPeriod; d > 0 {
			c.wg.Go(func() { c.resync(d) })
		}
	})
}

// resync queues every cached object every d while the controller is active.
func (c *Controller[T]) resync(d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.active.Load() {
			c.q.AddBacklog(batch{Keys: c.cache.keys(), Cause: Cause{Trigger: TriggerResync}})
			c.mgr.activity.Add(1)
		}
	}
}

// pause deactivates a standing-by replica's controller as a restart would,
// and waits up to timeout for its canceled reconciles to return.
func (c *Controller[T]) pause(timeout time.Duration) error {
	c.mu.Lock()
	c.active.Store(false) // under the lock activate checks the term in
	clear(c.tombstones)
	c.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for c.q.Processing() != 0 {
		select {
		case <-t.C:
			return fmt.Errorf("ctrl: %s: %d reconciles still running after the shutdown timeout", c, c.q.Processing())
		case <-poll.C:
		}
	}
	return nil
}

func (c *Controller[T]) shutdown(timeout time.Duration) error {
	c.active.Store(false)
	c.stopping.Store(true)
	c.stopOnce.Do(func() { close(c.stop) })
	c.q.ShutDown()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("ctrl: %s: %d reconciles still running after the shutdown timeout", c, c.q.Processing())
	}
}
