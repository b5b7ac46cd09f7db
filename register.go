package ctrl

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// APIResource says where and how the API server serves a type: its group,
// version and plural resource name, its kind, its scope, and whether it has
// a status subresource. It registers a custom resource type with
// [Register], and names the resource of an *unstructured.Unstructured
// cache or client (CacheOptions.Resource, ClientOptions.Resource).
type APIResource struct {
	Group    string // "example.com"; "" for the core group
	Version  string // "v1"
	Resource string // the lower-case plural: "widgets"
	// Kind defaults to the name of the Go type; *unstructured.Unstructured
	// needs it set.
	Kind       string
	Namespaced bool
	// Status says the resource has a status subresource, as a
	// CustomResourceDefinition with `subresources: {status: {}}` does:
	// UpdateStatus, PatchStatus and status applies use it. Without it they
	// fail with an error that says so, and never reach the server.
	Status bool
}

func (r APIResource) info(t reflect.Type) binding.Info {
	return binding.Info{
		Type:       t,
		GVR:        schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
		Kind:       r.Kind,
		Namespaced: r.Namespaced,
		Status:     r.Status,
	}
}

// Register records that the API server serves the custom resource type T as
// r. T is a pointer to a struct that embeds metav1.TypeMeta and
// metav1.ObjectMeta with JSON tags like a generated type, and implements
// DeepCopyObject; nothing else is needed: no clientset, no scheme. Call it
// once, before creating managers that use T, for example in an init
// function. Registering T again with the same r does nothing; with another
// r, or for a built-in type, it returns an error.
func Register[T Object](r APIResource) error {
	if err := binding.Register(r.info(reflect.TypeFor[T]())); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}
