package ctrl

// pending reports whether a write to key through the manager's Clients is
// still to be observed by the cache; the event that brings it follows.
func (c *Cache[T]) pending(key Key) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.expect[key]
	return ok
}

// holds reports whether obj, read from the cache, is still what it holds
// for key with no write to key pending, both at one instant: obj is then
// the newest state this program knows. Otherwise an event queues the key.
func (c *Cache[T]) holds(key Key, obj T) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.expect[key]; ok {
		return false
	}
	cur, ok := c.items.get(key)
	return ok && any(cur) == any(obj)
}

// version returns the newest resourceVersion this program knows for key:
// a pending write's, else the cached object's; "" if none, or deleted.
func (c *Cache[T]) version(key Key) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.expect[key]; ok {
		return e.rv
	}
	if cur, ok := c.items.get(key); ok {
		return cur.GetResourceVersion()
	}
	return ""
}
