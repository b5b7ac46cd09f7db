package ctrl

import "iter"

// objects holds a cache's objects by cluster and namespace, then by name;
// the zero value is ready. Callers hold the cache's lock.
type objects[T Object] struct {
	parts map[part]map[string]T
	n     int
}

// part is one namespace of one cluster.
type part struct{ cluster, namespace string }

func partOf(k Key) part { return part{k.Cluster, k.Namespace} }

func (o *objects[T]) get(k Key) (T, bool) {
	obj, ok := o.parts[partOf(k)][k.Name]
	return obj, ok
}

func (o *objects[T]) set(k Key, obj T) (old T, existed bool) {
	if o.parts == nil {
		o.parts = map[part]map[string]T{}
	}
	p := partOf(k)
	names := o.parts[p]
	if names == nil {
		names = map[string]T{}
		o.parts[p] = names
	}
	old, existed = names[k.Name]
	names[k.Name] = obj
	if !existed {
		o.n++
	}
	return old, existed
}

func (o *objects[T]) remove(k Key) (old T, existed bool) {
	p := partOf(k)
	names := o.parts[p]
	old, existed = names[k.Name]
	if !existed {
		return old, false
	}
	delete(names, k.Name)
	if len(names) == 0 {
		delete(o.parts, p) // a namespace emptied for good frees its map
	}
	o.n--
	return old, true
}

func (o *objects[T]) len() int { return o.n }

func (o *objects[T]) all() iter.Seq2[Key, T] {
	return func(yield func(Key, T) bool) {
		for p, names := range o.parts {
			for name, obj := range names {
				if !yield(Key{Namespace: p.namespace, Name: name, Cluster: p.cluster}, obj) {
					return
				}
			}
		}
	}
}

// in yields the objects of one namespace ("" every) of one cluster.
func (o *objects[T]) in(cluster, namespace string) iter.Seq2[Key, T] {
	return func(yield func(Key, T) bool) {
		if namespace != "" {
			for name, obj := range o.parts[part{cluster, namespace}] {
				if !yield(Key{Namespace: namespace, Name: name, Cluster: cluster}, obj) {
					return
				}
			}
			return
		}
		for p, names := range o.parts {
			if p.cluster != cluster {
				continue
			}
			for name, obj := range names {
				if !yield(Key{Namespace: p.namespace, Name: name, Cluster: p.cluster}, obj) {
					return
				}
			}
		}
	}
}
