package ctrl

import (
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// bindingID is a Go type, with the resource for types that serve any.
type bindingID struct {
	typ reflect.Type
	gvr schema.GroupVersionResource
}

// bind resolves T against the manager's own clients, once per bindingID.
func bind[T Object](m *Manager, res APIResource) (*binding.Binding[T], error) {
	return bindWith[T](m, m.bindings, m.clients, res)
}

// bindWith resolves T against clients, once per bindingID; m.mu guards bindings.
func bindWith[T Object](m *Manager, bindings map[bindingID]any, clients binding.Clients, res APIResource) (*binding.Binding[T], error) {
	info, err := res.info(reflect.TypeFor[T]())
	if err != nil {
		return nil, fmt.Errorf("ctrl: %w", err)
	}
	id := bindingID{typ: reflect.TypeFor[T]()}
	if info != nil {
		id.gvr = info.GVR
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := bindings[id]; ok {
		return b.(*binding.Binding[T]), nil
	}
	b, err := binding.For[T](clients, info)
	if errors.Is(err, binding.ErrNotServed) || errors.Is(err, binding.ErrOffline) {
		// Its CRD is not installed yet, or there is no server: a declared
		// scope binds it with the fakes' defaults, not kept, so the next
		// bind asks discovery again.
		clients.Discover = nil
		if guess, gerr := binding.For[T](clients, info); gerr == nil && !guess.ScopeUnknown {
			return guess, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ctrl: %w", err)
	}
	bindings[id] = b
	return b, nil
}

// cachesOf returns the manager's caches of the type and resource of b.
func cachesOf[T Object](m *Manager, b *binding.Binding[T]) []*Cache[T] {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Cache[T]
	for _, c := range m.cacheList {
		if cc, ok := c.(*Cache[T]); ok && cc.b.GVR == b.GVR {
			out = append(out, cc)
		}
	}
	return out
}
