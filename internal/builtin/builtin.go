// Package builtin maps the Go types of k8s.io/api to the resources the API
// server serves them as. The table holds only strings, so a program links the
// API packages it uses and no others.
package builtin

import "reflect"

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
