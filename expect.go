package ctrl

import (
	"github.com/typedctrl/ctrl/internal/objects"
	"github.com/typedctrl/ctrl/internal/scope"
)

// The cache's expectations (internal/objects) are its Client's writes not
// yet observed, which WaitIdle waits for and reconciles trust.

// expectWrite returns what to call with the write's outcome (deleted: no object).
func (c *Cache[T]) expectWrite(key Key) func(obj T, deleted bool, err error) {
	c.mgr.activity.Add(1) // a write in flight: an idle check running now is void
	f := c.feedOf(key)
	switch {
	case f == nil:
		return func(T, bool, error) {} // outside the cache's clusters and namespaces
	case f.b.Fake():
		c.mu.Lock()
		c.items.WillWrite(objects.Key(key))
		c.mu.Unlock()
		return func(obj T, deleted bool, err error) {
			c.mu.Lock()
			changed := c.items.FakeWrote(objects.Key(key), obj, deleted, err)
			c.mu.Unlock()
			if changed {
				c.mgr.activity.Add(1)
			}
		}
	}
	return func(obj T, deleted bool, err error) {
		if err != nil {
			return
		}
		c.mu.Lock()
		c.items.Wrote(objects.Key(key), obj, deleted, f.lastRV, func(obj T) bool {
			return c.scope.Selects(obj) == scope.NotSelected
		})
		c.mu.Unlock()
		c.mgr.activity.Add(1)
	}
}

// settlePassed drops expectations of writes the feeds passed unseen. Under c.mu.
func (c *Cache[T]) settlePassed() {
	c.items.Settle(func(k objects.Key) string {
		if f := c.feedOf(Key(k)); f != nil {
			return f.lastRV
		}
		return ""
	})
}

// pending reports whether a write to key through the manager's Clients is
// still to be observed by the cache; the event that brings it follows.
func (c *Cache[T]) pending(key Key) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.Pending(objects.Key(key))
}

// holds reports whether obj, read from the cache, is still what it holds
// for key with no write to key pending, both at one instant: obj is then
// the newest state this program knows. Otherwise an event queues the key.
func (c *Cache[T]) holds(key Key, obj T) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.Holds(objects.Key(key), obj)
}

// version returns the newest resourceVersion this program knows for key:
// a pending write's, else the cached object's; "" if none, or deleted.
func (c *Cache[T]) version(key Key) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.Version(objects.Key(key))
}
