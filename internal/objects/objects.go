// Package objects holds a cache's objects by cluster, namespace and name,
// files them under the cache's indexes, and keeps the writes of this
// program that the cache has not observed yet (expectations), which decide
// when the program is idle and what a reconcile may trust.
//
// A Store is not safe for concurrent use: its cache locks around each call.
package objects

import (
	"iter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Key names an object; it converts to and from the library's Key.
type Key struct {
	Namespace, Name string
	Cluster         string
}

// part is one namespace of one cluster.
type part struct{ cluster, namespace string }

func partOf(k Key) part { return part{k.Cluster, k.Namespace} }

// Store holds objects. The zero value is ready.
type Store[T metav1.Object] struct {
	parts   map[part]map[string]T
	n       int
	indexes map[string]*index[T]
	expect  map[Key]Expectation
	guard   *guard[T] // nil unless Guard
}

// Get returns the object of k.
func (s *Store[T]) Get(k Key) (T, bool) {
	obj, ok := s.parts[partOf(k)][k.Name]
	return obj, ok
}

// Set stores obj as k's object, filed under the indexes.
func (s *Store[T]) Set(k Key, obj T) (old T, existed bool) {
	if s.parts == nil {
		s.parts = map[part]map[string]T{}
	}
	p := partOf(k)
	names := s.parts[p]
	if names == nil {
		names = map[string]T{}
		s.parts[p] = names
	}
	old, existed = names[k.Name]
	names[k.Name] = obj
	if !existed {
		s.n++
	}
	if g := s.guard; g != nil {
		if existed {
			g.check(k, old)
		}
		g.copies[k] = g.copy(obj)
	}
	for _, idx := range s.indexes {
		idx.remove(k)
		idx.add(k, obj)
	}
	return old, existed
}

// Remove removes k's object.
func (s *Store[T]) Remove(k Key) (old T, existed bool) {
	p := partOf(k)
	names := s.parts[p]
	old, existed = names[k.Name]
	if !existed {
		return old, false
	}
	delete(names, k.Name)
	if g := s.guard; g != nil {
		g.check(k, old)
		delete(g.copies, k)
	}
	if len(names) == 0 {
		delete(s.parts, p) // a namespace emptied for good frees its map
	}
	s.n--
	for _, idx := range s.indexes {
		idx.remove(k)
	}
	return old, true
}

// Len returns the number of objects.
func (s *Store[T]) Len() int { return s.n }

// All yields every object, in no order.
func (s *Store[T]) All() iter.Seq2[Key, T] {
	return func(yield func(Key, T) bool) {
		for p, names := range s.parts {
			for name, obj := range names {
				if !yield(Key{Namespace: p.namespace, Name: name, Cluster: p.cluster}, obj) {
					return
				}
			}
		}
	}
}

// In yields the objects of one namespace ("" every) of one cluster.
func (s *Store[T]) In(cluster, namespace string) iter.Seq2[Key, T] {
	return func(yield func(Key, T) bool) {
		if namespace != "" {
			for name, obj := range s.parts[part{cluster, namespace}] {
				if !yield(Key{Namespace: namespace, Name: name, Cluster: cluster}, obj) {
					return
				}
			}
			return
		}
		for p, names := range s.parts {
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

// Clear removes every object and expectation; the indexes stay, empty.
func (s *Store[T]) Clear() {
	s.parts, s.n = nil, 0
	for _, idx := range s.indexes {
		clear(idx.values)
		clear(idx.filed)
	}
	clear(s.expect)
	if s.guard != nil {
		clear(s.guard.copies)
	}
}
