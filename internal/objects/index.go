package objects

// index files objects under their values, then namespaces.
type index[T any] struct {
	fn     func(T) []string
	values map[string]map[string]map[Key]struct{} // value -> namespace -> keys
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
	idx := &index[T]{fn: fn, values: map[string]map[string]map[Key]struct{}{}}
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
