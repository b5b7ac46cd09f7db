package ctrl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// WaitIdle blocks until the manager is idle, or ctx is done, or the manager
// has stopped. Idle means: Start has synced every cache and started every
// controller; every write made through a [Client] of this manager has been
// observed by the caches of its type; no event is being dispatched; every
// work queue is empty; no reconcile is running; and no requeue is due within
// horizon. It is meant for tests and examples, in place of sleeps.
//
// Writes made with other clients are not tracked: wait for their effect on
// the server or in a cache instead.
func (m *Manager) WaitIdle(ctx context.Context, horizon time.Duration) error {
	select {
	case <-m.startedCh:
	case <-m.stopped:
		return m.stoppedErr()
	case <-ctx.Done():
		return fmt.Errorf("ctrl: WaitIdle: %w", context.Cause(ctx))
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		busy := m.busy(horizon)
		if busy == "" {
			return nil
		}
		select {
		case <-tick.C:
		case <-m.stopped:
			return m.stoppedErr()
		case <-ctx.Done():
			return fmt.Errorf("ctrl: WaitIdle: %w; still busy: %s", context.Cause(ctx), busy)
		}
	}
}

func (m *Manager) stoppedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.startErr != nil {
		return fmt.Errorf("ctrl: WaitIdle: manager stopped: %w", m.startErr)
	}
	return errors.New("ctrl: WaitIdle: manager stopped")
}

// busy checks every condition of WaitIdle between two reads of the
// activity counter, so that the conditions held at one instant. It says
// what is busy, or returns "".
func (m *Manager) busy(horizon time.Duration) string {
	before := m.activity.Load()
	m.mu.Lock()
	caches := append([]runner(nil), m.cacheList...)
	ctrls := append([]worker(nil), m.ctrlList...)
	m.mu.Unlock()
	for _, c := range caches {
		select {
		case <-c.syncedChan():
		default:
			return c.describe() + ": not synced"
		}
		if b := c.busy(); b != "" {
			return b
		}
	}
	for _, c := range ctrls {
		if b := c.busy(horizon); b != "" {
			return b
		}
	}
	if m.activity.Load() != before {
		return "activity while checking"
	}
	return ""
}

// busy says why the cache is not idle, or returns "": a write made through
// a Client not yet observed, or an event being dispatched.
func (c *Cache[T]) busy() string {
	if c.dispatching.Load() != 0 {
		return c.String() + ": dispatching an event"
	}
	if ch := c.fakeEvents.Load(); ch != nil && len(*ch) > 0 {
		return fmt.Sprintf("%s: %d watch events not yet received", c, len(*ch))
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for k, e := range c.expect {
		what := "resourceVersion " + e.rv
		if e.deleting {
			what = "its deletion"
		}
		if c.b.Fake() {
			what = fmt.Sprintf("%d writes", e.writes)
		}
		return fmt.Sprintf("%s: waiting to observe %s of %s (%d writes pending in all)", c, what, k, len(c.expect))
	}
	return ""
}

func (c *Controller[T]) busy(horizon time.Duration) string {
	switch {
	case c.q.backlogLen.Load() != 0: // read first: the backlog empties into the queue
		return fmt.Sprintf("%s: %d keys of a list not yet queued", c, c.q.backlogLen.Load())
	case c.q.Len() != 0:
		return fmt.Sprintf("%s: %d keys queued", c, c.q.Len())
	case c.q.processing.Load() != 0:
		return fmt.Sprintf("%s: %d keys being reconciled", c, c.q.processing.Load())
	case c.q.dueWithin(horizon):
		return fmt.Sprintf("%s: a requeue is due within %s", c, horizon)
	}
	return ""
}

// observe settles the expectation for key given the object's new state
// (present false: it is gone). Called with c.mu held.
func (c *Cache[T]) observe(key Key, obj T, present bool) {
	e, ok := c.expect[key]
	if !ok {
		return
	}
	if c.b.Fake() {
		if e.writes--; e.writes > 0 {
			c.expect[key] = e
			return
		}
	} else if present && !seen(e, obj) {
		return
	}
	delete(c.expect, key)
}

// seen reports whether obj reflects the write that e expects.
func seen[T Object](e expectation, obj T) bool {
	if e.deleting {
		return obj.GetDeletionTimestamp() != nil
	}
	return newer(obj.GetResourceVersion(), e.rv)
}

// newer reports whether resourceVersion a is at or past b. A version that
// cannot be compared counts as past: it cannot be waited for.
func newer(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || cmp >= 0
}

// expectWrite is called before a write through a Client to the object with
// key. It returns the function to call with the write's outcome: the object
// the server returned (for a delete: deleted true).
func (c *Cache[T]) expectWrite(key Key) func(obj T, deleted bool, err error) {
	if c.opts.Namespace != "" && key.Namespace != c.opts.Namespace {
		return func(T, bool, error) {}
	}
	c.mgr.activity.Add(1)
	if c.b.Fake() {
		// A fake sends the event before the write returns, so count the
		// write first and take it back if it failed.
		c.mu.Lock()
		e := c.expect[key]
		e.writes++
		c.expect[key] = e
		c.mu.Unlock()
		return func(_ T, _ bool, err error) {
			if err == nil {
				return
			}
			c.mu.Lock()
			if e, ok := c.expect[key]; ok {
				if e.writes--; e.writes > 0 {
					c.expect[key] = e
				} else {
					delete(c.expect, key)
				}
			}
			c.mu.Unlock()
		}
	}
	return func(obj T, deleted bool, err error) {
		if err != nil {
			return
		}
		e := expectation{deleting: deleted}
		if !deleted {
			e.rv = obj.GetResourceVersion()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		cur, cached := c.items[key]
		switch {
		case deleted && !cached:
		case cached && seen(e, cur):
		case !deleted && newer(c.lastRV, e.rv):
			// Events arrive in resourceVersion order: the cache is past
			// this write. This happens when removing the last finalizer
			// deletes the object and its DELETED event beats the reply.
		case !deleted && !cached && !(c.sel == nil || c.sel.Matches(labels.Set(obj.GetLabels()))):
			// Outside the cache's selector: no event will come.
		default:
			c.expect[key] = e
		}
	}
}
