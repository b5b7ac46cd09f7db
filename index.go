package ctrl

import (
	"fmt"

	"github.com/typedctrl/ctrl/internal/objects"
)

// AddIndex adds an index named name: fn returns, fast and without blocking
// or modifying the object, the values under which [Cache.ByIndex] and
// [ListParams].Index find it, within its namespace. Cached objects are
// indexed at once. It returns an error if the name is taken.
func (c *Cache[T]) AddIndex(name string, fn func(T) []string) error {
	if fn == nil {
		return fmt.Errorf("ctrl: index %q on %s: nil function", name, c)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.items.AddIndex(name, fn) {
		return fmt.Errorf("ctrl: index %q on %s already exists", name, c)
	}
	return nil
}

// ByIndex returns the cached objects in namespace ("" for all; in a fleet
// cache, every member's) that index name files under value, in no order.
// They are shared ([Client.List] returns copies); its cost grows with the
// objects returned. It returns an error if there is no such index, or if a
// namespace is given for a cluster-scoped type.
func (c *Cache[T]) ByIndex(namespace, name, value string) ([]T, error) {
	return c.byIndex(namespace, name, value, nil)
}

func (c *Cache[T]) byIndex(namespace, name, value string, keep func(Key) bool) ([]T, error) {
	if namespace != "" && !c.b.Namespaced {
		return nil, fmt.Errorf("ctrl: index %q of %s: the resource is cluster-scoped: look up namespace \"\"", name, c)
	}
	var match func(objects.Key) bool
	if keep != nil {
		match = func(k objects.Key) bool { return keep(Key(k)) }
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out, ok := c.items.ByIndex(namespace, name, value, match)
	if !ok {
		return nil, fmt.Errorf("ctrl: %s has no index %q", c, name)
	}
	return out, nil
}

func (c *Cache[T]) hasIndex(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items.HasIndex(name)
}
