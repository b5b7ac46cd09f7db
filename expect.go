package ctrl

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// A reconcile handed the cache's object itself, unchecked, may change it
// in place (a controller-runtime habit) and then fail, or fail to write
// it: the change must not outlive the failure, or the retry would find it
// made and write nothing. suspect records such an object; the key's next
// reconcile reads the server instead (repair), and the cache takes the
// server's object back if it is still at that version. An object replaced
// meanwhile by its next event is no longer suspect.

// suspect records that obj, if it is key's cached object, may have been
// changed in place by a reconcile or write that failed.
func (c *Cache[T]) suspect(key Key, obj T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.items.Get(objects.Key(key)); !ok || any(cur) != any(obj) {
		return
	}
	if c.suspects == nil {
		c.suspects = map[Key]T{}
	}
	if _, had := c.suspects[key]; !had {
		c.nSuspects.Add(1)
	}
	c.suspects[key] = obj
}

// repair returns key's object for a reconcile: cached (ok: in the cache),
// unless it is suspect, when it returns the server's, read as the key's
// watch would deliver it (ok false: gone or out of the cache's selection,
// as its event will tell). Its error is the server's, naming why it asked.
func (c *Cache[T]) repair(ctx context.Context, key Key, cached T, ok bool) (T, bool, error) {
	if c.nSuspects.Load() == 0 {
		return cached, ok, nil
	}
	suspected := func() bool { // under mu
		s, had := c.suspects[key]
		cur, in := c.items.Get(objects.Key(key))
		if had && (!in || any(cur) != any(s)) {
			delete(c.suspects, key) // replaced since: the server's own object
			c.nSuspects.Add(-1)
			had = false
		}
		return had
	}
	c.mu.Lock()
	had := ok && suspected()
	c.mu.Unlock()
	f := c.feedOf(key)
	if !had || f == nil {
		return cached, ok, nil
	}
	var zero T
	live, err := f.b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
	if err == nil {
		live, err = f.prepare(live)
	}
	switch {
	case apierrors.IsNotFound(err):
		return zero, false, nil
	case err != nil:
		return cached, ok, fmt.Errorf("ctrl: read %s %s from the server, since a failed reconcile may have changed the cached object: %w", c.b.Type, key, err)
	case c.scope.Selects(live) == scope.NotSelected || !c.serves(live):
		return zero, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if suspected() && live.GetResourceVersion() == cached.GetResourceVersion() {
		c.items.Set(objects.Key(key), live)
		delete(c.suspects, key)
		c.nSuspects.Add(-1)
	}
	return live, true, nil
}
