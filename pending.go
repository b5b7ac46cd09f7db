package ctrl

// pending reports whether a write to the object with key, made through a
// Client of the manager, is still to be observed by the cache: until it
// is, the cached object is older than what this program wrote, and the
// event that brings the write follows. A [Machine] waits for it rather
// than step from the older state.
func (c *Cache[T]) pending(key Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.expect[key]
	return ok
}
