package ctrl

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// APIResource says where and how the API server serves a type: its group,
// version and plural resource name, its kind, and what discovery cannot be
// asked about in tests: its scope, and whether it has a status subresource.
// It registers a custom resource type with [Register], and names the
// resource of an *unstructured.Unstructured or *metav1.PartialObjectMetadata
// cache or client (CacheOptions.Resource, ClientOptions.Resource).
//
// Leave Namespaced, ClusterScoped and Status unset, and a manager with
// Options.Config learns them from the API server's discovery when it first
// binds the type (NewCache, NewController, NewClient), once per group and
// version: the CustomResourceDefinition says them. A value set that the
// server contradicts is an error then, naming the field and the server's
// answer. Fakes have no discovery: there an unset scope is namespaced, and
// an unset Status means a status subresource if the Go type has a status
// field (always, for *unstructured.Unstructured); so do the member clusters
// of a fleet. Set them for a cluster-scoped type on the fakes or in a fleet,
// or to wire without reaching the server.
type APIResource struct {
	Group    string // "example.com"; "" for the core group
	Version  string // "v1"
	Resource string // the lower-case plural: "widgets"
	// Kind defaults to the name of the Go type; *unstructured.Unstructured
	// and *metav1.PartialObjectMetadata need it set.
	Kind string
	// Namespaced declares that objects live in namespaces, as a
	// CustomResourceDefinition with `scope: Namespaced` says; ClusterScoped
	// that they do not (`scope: Cluster`). Set one at most. Default:
	// learned from discovery; namespaced on the fakes.
	Namespaced, ClusterScoped bool
	// Status declares a status subresource, as a CustomResourceDefinition
	// with `subresources: {status: {}}` has: UpdateStatus, PatchStatus and
	// status applies use it. Without one they fail with an error that says
	// so, and never reach the server. Default: learned from discovery; on
	// the fakes, whether the Go type has a status field.
	Status bool
}

func (r APIResource) info(t reflect.Type) binding.Info {
	return binding.Info{
		Type:          t,
		GVR:           schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
		Kind:          r.Kind,
		Namespaced:    r.Namespaced,
		ScopeUnknown:  !r.Namespaced && !r.ClusterScoped,
		Status:        r.Status,
		StatusUnknown: !r.Status,
	}
}

// check rejects contradictory fields.
func (r APIResource) check() error {
	if r.Namespaced && r.ClusterScoped {
		return fmt.Errorf("%s: set APIResource.Namespaced or ClusterScoped, not both", schema.GroupResource{Group: r.Group, Resource: r.Resource})
	}
	return nil
}

// resourceInfo is r as a binding's resource option: nil for the zero r.
func resourceInfo[T Object](r APIResource) *binding.Info {
	if r == (APIResource{}) {
		return nil
	}
	i := r.info(reflect.TypeFor[T]())
	return &i
}

// apiResource is the APIResource of a binding's Info, with what it knows
// of the scope and status subresource declared.
func apiResource(i binding.Info) APIResource {
	return APIResource{Group: i.GVR.Group, Version: i.GVR.Version, Resource: i.GVR.Resource, Kind: i.Kind,
		Namespaced: i.Namespaced && !i.ScopeUnknown, ClusterScoped: !i.Namespaced && !i.ScopeUnknown,
		Status: i.Status && !i.StatusUnknown}
}

// resourceOption is the Resource option that binds a type as info says:
// its resource for the types that serve one named at run time, none for
// the others.
func resourceOption(info binding.Info) APIResource {
	if info.Type == binding.UnstructuredType || info.Type == binding.MetadataType {
		return apiResource(info)
	}
	return APIResource{}
}

// resolve returns the Info of T as the manager's own cluster serves it:
// what its registration left unsaid learned as a binding learns it.
func resolve[T Object](m *Manager) (binding.Info, error) {
	info, err := binding.Lookup[T]()
	if err != nil || !info.ScopeUnknown && !info.StatusUnknown {
		return info, err
	}
	b, err := bind[T](m, APIResource{})
	if err != nil {
		return info, err
	}
	return b.Info, nil
}

// Register records that the API server serves the custom resource type T as
// r: its group, version and resource; the rest is learned from the server
// (see [APIResource]). T is a pointer to a struct that embeds
// metav1.TypeMeta and metav1.ObjectMeta with JSON tags like a generated
// type, and implements DeepCopyObject (controller-gen writes it; see the
// README's "A custom resource"); nothing else is needed: no clientset, no
// scheme. Call it
// once, before creating managers that use T, for example in an init
// function. Registering T again with the same r does nothing; with another
// r, or for a built-in type, it returns an error.
func Register[T Object](r APIResource) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("ctrl: Register %s: %w", reflect.TypeFor[T](), err)
	}
	if err := binding.Register(r.info(reflect.TypeFor[T]())); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}

// MustRegister is [Register] for an init function or a package-level
// variable: it panics with Register's error, which names the type.
//
//	func init() { ctrl.MustRegister[*Widget](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets", Namespaced: true}) }
func MustRegister[T Object](r APIResource) {
	if err := Register[T](r); err != nil {
		panic(err)
	}
}

// Project makes P a projection of the API type T, for caches that hold many
// large objects: a [Cache], [Controller] or [Client] of P reads the objects
// of T from the server and keeps only what fn returns for each, so its
// memory is that of the small P, and the type checker stops a reconcile from
// reading a field the cache does not hold. P is a pointer to a struct with
// TypeMeta and ObjectMeta (fn sets the metadata the controller reads: at
// least the name and namespace; ownerReferences for [Owns]; the
// resourceVersion) and a DeepCopyObject method. fn must copy what it keeps
// rather than point into the object it is given, so that nothing of that
// object stays alive, and must accept its own output's source again (an
// object may be projected twice). Clients of P read only; write through a
// client of T.
//
// For metadata alone, no projection is needed: use
// *metav1.PartialObjectMetadata with CacheOptions.Resource, and the server
// sends metadata only. Call Project once per P, before creating managers
// that use it, for example in an init function; again with the same T it
// does nothing.
func Project[T, P Object](fn func(T) P) error {
	if fn == nil {
		return fmt.Errorf("ctrl: Project %s: nil function", reflect.TypeFor[P]())
	}
	if err := binding.RegisterProjection(fn); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}
