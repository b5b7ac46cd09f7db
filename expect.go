package ctrl

import (
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Write expectations let WaitIdle wait for the consequences of a program's
// own writes. A write through a Client returns before the watch event that
// reports it reaches the cache; until it does, the cache does not show the
// write and no controller has reacted to it. Each cache that will see the
// write records an expectation, keyed by the object the server returned
// (a create with generateName learns its name only then), and the store
// settles it when the event arrives.

// expectation is a write through a [Client] that the cache has not observed.
type expectation struct {
	rv       string // observed once the object, or the feed, reaches this version
	deleting bool   // observed once the object is gone or has a deletionTimestamp
	gone     bool   // observed once the object is gone
	writes   int    // fake backends: events still to come
}

// observe settles the expectation for key given the object's new state
// (present false: it is gone), seen by a feed of a fake backend or not.
// Called with c.mu held.
func (c *Cache[T]) observe(key Key, obj T, present, fake bool) {
	e, ok := c.expect[key]
	if !ok {
		return
	}
	if fake {
		// A fake's write that removed the last finalizer sends an update
		// and then the removal: only the removal settles it.
		if e.writes--; e.writes > 0 || e.gone && present {
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

// expectWrite is called before a write through a Client to the object with
// key. It returns the function to call with the write's outcome: the object
// the server returned (for a delete: deleted true, and no object).
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
			// The write left an object being deleted without finalizers
			// or grace period: the server deleted it (as its registry's
			// ShouldDeleteDuringUpdate says), and replied with the object
			// as the request left it, at the resourceVersion it had,
			// which the cache may already hold. Only its removal settles
			// this. (If the server kept it, the reply is newer than the
			// cache: see below.)
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
		case cached && seen(e, cur):
		case !deleted && !e.gone && f.lastRV != "" && newer(f.lastRV, e.rv):
			// Events arrive in resourceVersion order: the feed is past
			// this write. This happens when removing the last finalizer
			// deletes the object and its DELETED event beats the reply.
			// A feed that has not listed yet is past nothing.
		case !deleted && !e.gone && !cached && c.scope.selects(obj) == notSelected:
			// Outside the cache's selector: no event will come.
		default:
			c.expect[key] = e
		}
		c.mgr.activity.Add(1)
	}
}

// removedBy reports whether a write that returned obj left an object being
// deleted without finalizers or grace period, which the server (and a fake
// taught by binding.DeleteLikeServer) then removes.
func removedBy[T Object](obj T) bool {
	return obj.GetDeletionTimestamp() != nil && len(obj.GetFinalizers()) == 0 &&
		(obj.GetDeletionGracePeriodSeconds() == nil || *obj.GetDeletionGracePeriodSeconds() == 0)
}

// expectFakeWrite counts a write to a fake, which sends the event before
// the write returns: count first, take it back if the write failed. A fake
// does not generate names, so the request's key is the object's. A write
// that left an object being deleted without finalizers is settled only by
// the object's removal, which the fake sends after the write's own event.
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

// settlePassed drops the expectations of writes the feeds have seen past
// without the object: writes that took it out of the cache's selector in a
// way this side could not tell, whose events the server never sends. The
// feeds' positions advance with every event and bookmark. Called with c.mu
// held.
func (c *Cache[T]) settlePassed() {
	for k, e := range c.expect {
		if e.rv == "" || e.gone { // the object's own removal settles it
			continue
		}
		if f := c.feedOf(k); f != nil && f.lastRV != "" && newer(f.lastRV, e.rv) {
			delete(c.expect, k)
		}
	}
}
