package ctrl

import (
	"github.com/typedctrl/ctrl/internal/scope"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// expectation is a Client's write not yet observed, which WaitIdle waits for.
type expectation struct {
	rv       string // observed once the object, or the feed, reaches this version
	deleting bool   // observed once the object is gone or has a deletionTimestamp
	gone     bool   // observed once the object is gone
	writes   int    // fake backends: events still to come
}

// observe settles key's expectation (present false: gone). Under c.mu.
func (c *Cache[T]) observe(key Key, obj T, present, fake bool) {
	e, ok := c.expect[key]
	if !ok {
		return
	}
	if fake {
		// A fake's last-finalizer removal sends an update, then the removal.
		if e.writes--; e.writes > 0 || e.gone && present {
			c.expect[key] = e
			return
		}
	} else if present && !seen(e, obj) {
		return
	}
	delete(c.expect, key)
}

func seen[T Object](e expectation, obj T) bool {
	if e.gone {
		return false
	}
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

// expectWrite returns what to call with the write's outcome (deleted: no object).
func (c *Cache[T]) expectWrite(key Key) func(obj T, deleted bool, err error) {
	c.mgr.activity.Add(1) // a write in flight: an idle check running now is void
	f := c.feedOf(key)
	switch {
	case f == nil:
		return func(T, bool, error) {} // outside the cache's clusters and namespaces
	case f.b.Fake():
		return c.expectFakeWrite(key)
	}
	return func(obj T, deleted bool, err error) {
		if err != nil {
			return
		}
		e := expectation{deleting: deleted}
		switch {
		case !deleted && removedBy(obj):
			// Deleted by the server on update: only its removal settles this.
			key = KeyOf(obj).InCluster(key.Cluster)
			e.rv, e.gone = obj.GetResourceVersion(), true
		case !deleted:
			key = KeyOf(obj).InCluster(key.Cluster) // a create with generateName has its name now
			e.rv = obj.GetResourceVersion()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		cur, cached := c.items.get(key)
		if e.gone && cached && !newer(cur.GetResourceVersion(), e.rv) {
			e.gone = false // an update the server kept: wait for its version
		}
		switch {
		case (deleted || e.gone) && !cached:
			if prev, ok := c.expect[key]; deleted && ok && prev.rv != "" && !prev.gone {
				// Deleted before the cache has its create (or an update): it
				// comes, then its deletion, which this waits for too.
				c.expect[key] = expectation{rv: prev.rv, deleting: true}
			}
		case cached && seen(e, cur):
		case !deleted && !e.gone && f.lastRV != "" && newer(f.lastRV, e.rv):
			// Events come in resourceVersion order: the feed is past this
			// write (its DELETED beat the reply). An unlisted feed is past nothing.
		case !deleted && !e.gone && !cached && c.scope.Selects(obj) == scope.NotSelected:
			// Outside the cache's selector: no event will come.
		default:
			c.expect[key] = e
		}
		c.mgr.activity.Add(1)
	}
}

// removedBy: deleted with no finalizers nor grace, which the server then removes.
func removedBy[T Object](obj T) bool {
	return obj.GetDeletionTimestamp() != nil && len(obj.GetFinalizers()) == 0 &&
		(obj.GetDeletionGracePeriodSeconds() == nil || *obj.GetDeletionGracePeriodSeconds() == 0)
}

// expectFakeWrite counts first: a fake sends the event before the write returns.
func (c *Cache[T]) expectFakeWrite(key Key) func(T, bool, error) {
	c.mu.Lock()
	e := c.expect[key]
	e.writes++
	c.expect[key] = e
	c.mu.Unlock()
	return func(obj T, deleted bool, err error) {
		if err == nil {
			if !deleted && removedBy(obj) {
				c.mu.Lock()
				if _, cached := c.items.get(key); cached {
					e := c.expect[key]
					e.gone = true
					c.expect[key] = e
				}
				c.mu.Unlock()
				c.mgr.activity.Add(1)
			}
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

// settlePassed drops expectations of writes the feeds passed unseen. Under c.mu.
func (c *Cache[T]) settlePassed() {
	for k, e := range c.expect {
		if e.rv == "" || e.gone { // the object's own removal settles it
			continue
		}
		if f := c.feedOf(k); f != nil && f.lastRV != "" && newer(f.lastRV, e.rv) {
			if _, cached := c.items.get(k); e.deleting && cached {
				continue // created, and its deletion still to come
			}
			delete(c.expect, k)
		}
	}
}
