package ctrl

import "fmt"

// index files objects under their values, then namespaces.
type index[T Object] struct {
	fn     func(T) []string
	values map[string]map[string]map[Key]struct{} // value -> namespace -> keys
}

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
	if _, ok := c.indexes[name]; ok {
		return fmt.Errorf("ctrl: index %q on %s already exists", name, c)
	}
	idx := &index[T]{fn: fn, values: map[string]map[string]map[Key]struct{}{}}
	for k, obj := range c.items.all() {
		idx.add(k, obj)
	}
	c.indexes[name] = idx
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
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx, ok := c.indexes[name]
	if !ok {
		return nil, fmt.Errorf("ctrl: %s has no index %q", c, name)
	}
	var out []T
	add := func(keys map[Key]struct{}) {
		for k := range keys {
			if keep != nil && !keep(k) {
				continue
			}
			if obj, ok := c.items.get(k); ok {
				out = append(out, obj)
			}
		}
	}
	if namespace != "" {
		add(idx.values[value][namespace])
		return out, nil
	}
	for _, keys := range idx.values[value] {
		add(keys)
	}
	return out, nil
}

func (c *Cache[T]) hasIndex(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.indexes[name] != nil
}

func (idx *index[T]) add(k Key, obj T) {
	for _, v := range idx.fn(obj) {
		byNS := idx.values[v]
		if byNS == nil {
			byNS = map[string]map[Key]struct{}{}
			idx.values[v] = byNS
		}
		set := byNS[k.Namespace]
		if set == nil {
			set = map[Key]struct{}{}
			byNS[k.Namespace] = set
		}
		set[k] = struct{}{}
	}
}

func (idx *index[T]) remove(k Key, obj T) {
	for _, v := range idx.fn(obj) {
		byNS := idx.values[v]
		set := byNS[k.Namespace]
		if set == nil {
			continue
		}
		delete(set, k)
		if len(set) == 0 {
			delete(byNS, k.Namespace)
			if len(byNS) == 0 {
				delete(idx.values, v)
			}
		}
	}
}
