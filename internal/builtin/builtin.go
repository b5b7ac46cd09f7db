// Package builtin maps the Go types of k8s.io/api to the resources the API
// server serves them as. The table holds only strings, so a program links the
// API packages it uses and no others.
package builtin

import (
	"iter"
	"maps"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

//go:generate go run ./gen

// Resource says where the API server serves a built-in type.
type Resource struct {
	Group, Version, Resource, Kind string
	Namespaced                     bool
	Watch                          bool // can be listed and watched
	Status                         bool // has a status subresource
}

// Lookup returns the resource for a pointer-to-struct type of k8s.io/api.
func Lookup(t reflect.Type) (Resource, bool) {
	if t.Kind() != reflect.Pointer {
		return Resource{}, false
	}
	r, ok := table[t.Elem().PkgPath()+"."+t.Elem().Name()]
	return r, ok
}

// LookupGVR returns the built-in resource with the given group, version and
// plural name, for objects handled without their Go type.
func LookupGVR(gvr schema.GroupVersionResource) (Resource, bool) {
	for _, r := range table {
		if r.Group == gvr.Group && r.Version == gvr.Version && r.Resource == gvr.Resource {
			return r, true
		}
	}
	return Resource{}, false
}

// All returns every built-in resource, in no particular order.
func All() iter.Seq[Resource] { return maps.Values(table) }
