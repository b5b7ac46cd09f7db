package ctrl

import (
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// APIResource says where the API server serves a type (group, version,
// plural resource, kind) and what tests cannot discover (scope, status
// subresource): for [Register], CacheOptions.Resource and
// ClientOptions.Resource. With CRD, the manifest says it all and wiring
// needs no API server. Otherwise, with Options.Config, unset scope and
// status are learned from discovery when the type is first wired; a set
// value the server contradicts is an error naming the field and the
// answer. Fakes and fleet members have no discovery.
type APIResource struct {
	Group    string // "example.com"; "" for the core group
	Version  string // "v1"
	Resource string // the lower-case plural: "widgets"
	// Kind defaults to the name of the Go type; *unstructured.Unstructured
	// and *metav1.PartialObjectMetadata need it set.
	Kind string
	// Namespaced declares namespaced objects (CRD `scope: Namespaced`),
	// ClusterScoped the opposite (`scope: Cluster`); set one at most. Default:
	// from discovery; without it, namespaced.
	Namespaced, ClusterScoped bool
	// Status declares a status subresource (CRD `subresources: {status: {}}`),
	// without which status writes fail before reaching the server. Default:
	// from discovery; without it, whether the Go type has a status field
	// (always for unstructured).
	Status bool
	// CRD is the type's CustomResourceDefinition manifest, YAML or JSON as
	// controller-gen writes it: Group, Resource, Kind, the scope and the
	// status subresource of Version (default: its only served version) come
	// from it, and a field set beside it that it contradicts is an error.
	// ctrltest.Manifests writes it out. Default: none.
	CRD []byte
}

// info returns what r says of the type t, or nil if r is the zero value.
func (r APIResource) info(t reflect.Type) (*binding.Info, error) {
	if reflect.ValueOf(r).IsZero() {
		return nil, nil
	}
	gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
	if r.Namespaced && r.ClusterScoped {
		return nil, fmt.Errorf("%s: set APIResource.Namespaced or ClusterScoped, not both", gr)
	}
	i := binding.Info{Type: t, GVR: gr.WithVersion(r.Version), Kind: r.Kind,
		Namespaced: r.Namespaced, ScopeUnknown: !r.Namespaced && !r.ClusterScoped,
		Status: r.Status, StatusUnknown: !r.Status}
	if r.CRD != nil {
		var err error
		if i, err = i.FromCRD(r.CRD); err != nil {
			return nil, err
		}
	}
	return &i, nil
}

func apiResource(i binding.Info) APIResource {
	return APIResource{Group: i.GVR.Group, Version: i.GVR.Version, Resource: i.GVR.Resource, Kind: i.Kind,
		Namespaced: i.Namespaced && !i.ScopeUnknown, ClusterScoped: !i.Namespaced && !i.ScopeUnknown,
		Status: i.Status && !i.StatusUnknown}
}

// resourceOption names the resource only for types that serve one named at run time.
func resourceOption(info binding.Info) APIResource {
	if info.Type == binding.UnstructuredType || info.Type == binding.MetadataType {
		return apiResource(info)
	}
	return APIResource{}
}

// resolve returns T's Info as the own cluster serves it.
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

// Register records that the API server serves the custom resource type T
// as r. T is a pointer to a struct that embeds metav1.TypeMeta and
// metav1.ObjectMeta with JSON tags and implements DeepCopyObject (see
// docs/custom-resources.md). Call it before creating managers that use
// T, such as in an init function. Registering T again with the same r does
// nothing; with another r, or for a built-in type, it returns an error.
func Register[T Object](r APIResource) error {
	info, err := r.info(reflect.TypeFor[T]())
	if err == nil && info == nil {
		err = errors.New("the APIResource is empty")
	}
	if err != nil {
		return fmt.Errorf("ctrl: Register %s: %w", reflect.TypeFor[T](), err)
	}
	if err := binding.Register(*info, r.CRD); err != nil {
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

// Project makes P a projection of the API type T: a [Cache], [Controller]
// or [Client] of P reads T and keeps only what fn returns, so memory is
// P's and the compiler stops reads of fields not kept (Bounded). P is a
// pointer to a struct with TypeMeta, ObjectMeta and DeepCopyObject; fn sets
// the metadata read (name, namespace, resourceVersion; ownerReferences for
// [Owns]), copies what it keeps (its argument is reused), and accepts an
// object twice. Clients of P read only.
//
// fields names, by JSON path ("spec.nodeName"), what fn reads of a
// built-in T besides metadata: only those are decoded (none: all); the
// first object of each watch is projected both ways and a difference
// logged. It returns an error for a path T lacks, or fields of a custom
// resource. Call it once per P before creating managers (a repeat with the
// same T and fields is a no-op).
func Project[T, P Object](fn func(T) P, fields ...string) error {
	if fn == nil {
		return fmt.Errorf("ctrl: Project %s: nil function", reflect.TypeFor[P]())
	}
	if err := binding.RegisterProjection(fn, fields...); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}
