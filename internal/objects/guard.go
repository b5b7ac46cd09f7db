package objects

// guard keeps a copy of each object, to find changes made to it in place.
type guard[T any] struct {
	copy    func(T) T
	diff    func(a, b T) string
	changed func(k Key, path string)
	copies  map[Key]T
}

// Guard makes s keep a copy (made by copy) of each object it stores and
// compare the object with it (diff returns the path of a difference, or
// "") when the object is replaced or removed, and at Check: changed gets
// each change found. For tests: it doubles the objects and their cost.
func (s *Store[T]) Guard(copy func(T) T, diff func(a, b T) string, changed func(k Key, path string)) {
	s.guard = &guard[T]{copy: copy, diff: diff, changed: changed, copies: map[Key]T{}}
	for k, obj := range s.All() {
		s.guard.copies[k] = copy(obj)
	}
}

// check reports a change to obj, k's object, since it was stored.
func (g *guard[T]) check(k Key, obj T) {
	if c, ok := g.copies[k]; ok {
		if path := g.diff(c, obj); path != "" {
			g.changed(k, path)
		}
	}
}

// Check compares every object with its copy, puts back the copy of each
// changed one, and reports whether one was.
func (s *Store[T]) Check() bool {
	g := s.guard
	if g == nil {
		return false
	}
	type change struct {
		k    Key
		obj  T
		path string
	}
	var changed []change
	for k, obj := range s.All() {
		if c, ok := g.copies[k]; ok {
			if path := g.diff(c, obj); path != "" {
				changed = append(changed, change{k, obj, path})
			}
		}
	}
	for _, c := range changed {
		g.changed(c.k, c.path)
		s.Replace(c.k, c.obj, g.copy(g.copies[c.k]))
	}
	return len(changed) > 0
}

// Replace stores with as k's object if k's object is still obj, for an
// object changed in place that with restores: Guard reports nothing.
func (s *Store[T]) Replace(k Key, obj, with T) bool {
	cur, ok := s.Get(k)
	if !ok || any(cur) != any(obj) {
		return false
	}
	g := s.guard
	s.guard = nil
	s.Set(k, with)
	s.guard = g
	return true
}
