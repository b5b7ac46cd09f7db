package objects

import "slices"

// index files objects under their values, then namespaces. It remembers
// the values it filed each key under and removes exactly those: an object
// changed in place since it was filed (a reader that changed the cache's
// object) would otherwise leave its old entries behind for good.
type index[T any] struct {
	fn     func(T) []string
	values map[string]map[string]map[Key]struct{} // value -> namespace -> keys
	filed  map[Key][]string                       // key -> the values it is filed under
}

// AddIndex files the objects, now and as they come, under the values fn
// returns. It reports false if the name is taken.
func (s *Store[T]) AddIndex(name string, fn func(T) []string) bool {
	if _, ok := s.indexes[name]; ok {
		return false
	}
	if s.indexes == nil {
		s.indexes = map[string]*index[T]{}
	}
	idx := &index[T]{fn: fn, values: map[string]map[string]map[Key]struct{}{}, filed: map[Key][]string{}}
	for k, obj := range s.All() {
		idx.add(k, obj)
	}
	s.indexes[name] = idx
	return true
}

// Indexes returns the functions of the indexes, by name.
func (s *Store[T]) Indexes() map[string]func(T) []string {
	fns := make(map[string]func(T) []string, len(s.indexes))
	for name, idx := range s.indexes {
		fns[name] = idx.fn
	}
	return fns
}

// HasIndex reports whether the index name exists.
func (s *Store[T]) HasIndex(name string) bool { return s.indexes[name] != nil }

// ByIndex returns the objects of namespace ("" all) that index name files
// under value and keep (if not nil) keeps, in no order; false if there is
// no such index.
func (s *Store[T]) ByIndex(namespace, name, value string, keep func(Key) bool) ([]T, bool) {
	idx, ok := s.indexes[name]
	if !ok {
		return nil, false
	}
	var out []T
	add := func(keys map[Key]struct{}) {
		for k := range keys {
			if keep != nil && !keep(k) {
				continue
			}
			if obj, ok := s.Get(k); ok {
				out = append(out, obj)
			}
		}
	}
	if namespace != "" {
		add(idx.values[value][namespace])
		return out, true
	}
	for _, keys := range idx.values[value] {
		add(keys)
	}
	return out, true
}

func (idx *index[T]) add(k Key, obj T) {
	vs := idx.fn(obj)
	if len(vs) == 0 {
		return
	}
	vs = slices.Clone(vs) // fn may return a slice of the object, which may change
	idx.filed[k] = vs
	for _, v := range vs {
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

// remove takes k out of every value it was filed under.
func (idx *index[T]) remove(k Key) {
	vs, ok := idx.filed[k]
	if !ok {
		return
	}
	delete(idx.filed, k)
	for _, v := range vs {
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
