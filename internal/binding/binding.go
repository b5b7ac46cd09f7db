// Package binding resolves a Go type to the resource the API server serves it
// as, and performs typed requests for it without a Scheme shared between
// types. Built-in types come from the generated table in internal/builtin;
// custom resources are registered by their Go type.
//
// A binding talks to one of three backends: the REST backend (a real API
// server: protobuf for built-in types, JSON for custom resources), the fake
// clientset of client-go (built-in types in tests), or a dynamic client
// (custom resources in tests).
package binding

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/builtin"
)

// Object is what every bound type implements: a pointer to a struct with
// ObjectMeta, TypeMeta and a deep copy.
type Object interface {
	metav1.Object
	runtime.Object
}

// Info says where the API server serves a Go type.
type Info struct {
	Type       reflect.Type
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	Builtin    bool // a k8s.io/api type: protobuf and strategic merge patch
	Watchable  bool // can be listed and watched
	Status     bool // has a status subresource
	// ScopeUnknown and StatusUnknown say that the registration left
	// Namespaced or Status unsaid: a binding to a real server learns them
	// from its discovery; elsewhere they hold the defaults for fakes.
	ScopeUnknown, StatusUnknown bool
	// Projection is the type whose objects the server sends, when the type
	// is a projection of it; nil otherwise.
	Projection reflect.Type
}

// GVK returns the group, version and kind of the type.
func (i Info) GVK() schema.GroupVersionKind { return i.GVR.GroupVersion().WithKind(i.Kind) }

// String names the Go type and its resource, for error messages:
// "*v1.ConfigMap (configmaps)", "*main.Widget (widgets.example.dev/v1)".
func (i Info) String() string {
	r := i.GVR.Resource
	if i.GVR.Group != "" {
		r += "." + i.GVR.Group
	}
	if !i.Builtin {
		r += "/" + i.GVR.Version
	}
	if i.Projection != nil {
		return fmt.Sprintf("%s (%s, projected from %s)", i.Type, r, i.Projection)
	}
	return fmt.Sprintf("%s (%s)", i.Type, r)
}

var (
	registry sync.Map // reflect.Type -> Info
	crds     sync.Map // reflect.Type -> []byte, the CRD manifest it was registered with
)

// Register records where a custom resource type is served, and the CRD
// manifest that said so, if any. Registering the same type again with the
// same Info is a no-op; with a different one, an error.
func Register(info Info, crd []byte) error {
	t := info.Type
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("register %s: the type must be a pointer to a struct", t)
	}
	if info.GVR.Version == "" || info.GVR.Resource == "" {
		return fmt.Errorf("register %s: Version and Resource must be set", t)
	}
	if info.GVR.Resource != strings.ToLower(info.GVR.Resource) {
		return fmt.Errorf("register %s: resource %q must be the lower-case plural name", t, info.GVR.Resource)
	}
	if _, ok := builtin.Lookup(t); ok {
		return fmt.Errorf("register %s: it is a built-in type and needs no registration", t)
	}
	if info.Kind == "" {
		info.Kind = t.Elem().Name()
	}
	info.Watchable, info.Builtin = true, false
	info = info.withDefaults()
	if prev, loaded := registry.LoadOrStore(t, info); loaded && prev.(Info) != info {
		return fmt.Errorf("register %s: already registered as %s %s", t, prev.(Info).GVR, prev.(Info).Kind)
	}
	if crd != nil {
		crds.LoadOrStore(t, crd)
	}
	return nil
}

// CRD returns the CRD manifest the type t was registered with, or nil.
func CRD(t reflect.Type) []byte {
	crd, _ := crds.Load(t)
	b, _ := crd.([]byte)
	return b
}

// Lookup returns the Info of T, or an error that names the type.
func Lookup[T Object]() (Info, error) {
	t := reflect.TypeFor[T]()
	if r, ok := builtin.Lookup(t); ok {
		return Info{
			Type:       t,
			GVR:        schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
			Kind:       r.Kind,
			Namespaced: r.Namespaced,
			Builtin:    true,
			Watchable:  r.Watch,
			Status:     r.Status,
		}, nil
	}
	if info, ok := registry.Load(t); ok {
		return info.(Info), nil
	}
	if t.Kind() != reflect.Pointer {
		return Info{}, fmt.Errorf("%s is not a pointer to an API object: use *%s", t, t)
	}
	if strings.HasPrefix(t.Elem().PkgPath(), "k8s.io/api/") {
		return Info{}, fmt.Errorf("%s is not served by the API server as a resource of its own", t)
	}
	return Info{}, fmt.Errorf("%s is not a known resource: register it with ctrl.Register", t)
}

// Clients are what a binding may talk to. The manager fills them from its
// options; at least one must serve each bound type.
type Clients struct {
	// Config and HTTP serve every type over REST. HTTP is shared by all types
	// so they share connections.
	Config *rest.Config
	HTTP   *http.Client
	// Clientset serves built-in types from client-go's fake clientset.
	Clientset Invoker
	// Dynamic serves custom resources.
	Dynamic dynamic.Interface
	// Discover, with Config, says what the server serves: a binding over
	// REST learns there what a registration left unsaid. Nil: the
	// defaults hold.
	Discover Discover
}

// Backend performs requests for one type. Namespace is "" for cluster-scoped
// types and for "all namespaces" in List and Watch.
type Backend[T Object] interface {
	Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[T], error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// Fake reports whether the backend is an in-memory fake. Its objects do
	// not carry resource versions, and each write yields exactly one watch
	// event before the write returns.
	Fake() bool
}

// Binding is a type's Info and the backend that serves it.
type Binding[T Object] struct {
	Info
	Backend[T]
	// Project turns an object the watch sends into T; nil when it sends T.
	Project func(any) (T, bool)
	// Stream opens a watch of a real API server whose events are decoded
	// on the goroutine that reads them (a *Stream), as so says, and for a
	// projection only what it reads; nil for fakes, whose Watch serves
	// instead.
	Stream func(ctx context.Context, namespace string, opts metav1.ListOptions, so StreamOptions) (watch.Interface, error)
}

// StreamOptions say how a Stream decodes.
type StreamOptions struct {
	// KeepManagedFields decodes metadata.managedFields, which are skipped
	// otherwise.
	KeepManagedFields bool
	// Report receives what a Stream finds wrong but decodes nonetheless:
	// the function of a projection that reads a field its registration
	// does not name, found by projecting the first object of each watch
	// twice, from the fields named and from the whole object.
	Report func(error)
}

// unstructuredType is the one type that serves any resource, named at run
// time.
var unstructuredType = reflect.TypeFor[*unstructured.Unstructured]()

// For resolves T and picks its backend from clients. res names the resource
// of an *unstructured.Unstructured, and must be nil for other types.
func For[T Object](c Clients, res *Info) (*Binding[T], error) {
	t := reflect.TypeFor[T]()
	switch t {
	case unstructuredType:
		return forUnstructured[T](c, res)
	case metadataType:
		return forMetadata[T](c, res)
	}
	if pr, ok := projections.Load(t); ok {
		if res != nil {
			return nil, fmt.Errorf("%s is a projection of %s, which names its resource: a Resource option is for *unstructured.Unstructured and *v1.PartialObjectMetadata only", t, pr.(projection).source)
		}
		b, err := pr.(projection).bind(c)
		if err != nil {
			return nil, err
		}
		return b.(*Binding[T]), nil
	}
	if res != nil {
		return nil, fmt.Errorf("%s names its resource: a Resource option is for *unstructured.Unstructured and *v1.PartialObjectMetadata only", t)
	}
	info, err := Lookup[T]()
	if err != nil {
		return nil, err
	}
	b := &Binding[T]{Info: info}
	switch {
	case info.Builtin && c.Clientset != nil:
		b.Backend = &fakeBackend[T]{info: info, fake: c.Clientset}
	case !info.Builtin && c.Dynamic != nil:
		b.Backend = &dynamicBackend[T]{info: info, client: c.Dynamic.Resource(info.GVR), fake: true}
	case c.Config != nil:
		if b.Info, err = resolved(info, c.Discover); err != nil {
			return nil, err
		}
		rb, err := newRESTBackend[T](b.Info, c.Config, c.HTTP)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", info, err)
		}
		b.Backend, b.Stream = rb, rb.stream
	case info.Builtin:
		return nil, fmt.Errorf("%s: no client serves built-in types: set Options.Config or Options.FakeClientset", info)
	default:
		return nil, fmt.Errorf("%s: no client serves custom resources: set Options.Config or Options.FakeDynamic", info)
	}
	return b, nil
}

// forUnstructured binds *unstructured.Unstructured to the resource res,
// over the fake dynamic client in tests and the dynamic client (JSON)
// otherwise.
func forUnstructured[T Object](c Clients, res *Info) (*Binding[T], error) {
	if res == nil || res.GVR.Version == "" || res.GVR.Resource == "" || res.Kind == "" {
		return nil, fmt.Errorf("%s: set the Resource option's Version, Resource and Kind to say which resource it holds", unstructuredType)
	}
	info := *res
	info.Type, info.Watchable, info.Builtin = unstructuredType, true, false
	if _, ok := builtin.LookupGVR(info.GVR); ok {
		info.Builtin = true
	}
	var d Discover
	if c.Dynamic == nil {
		d = c.Discover
	}
	info, err := resolved(info, d)
	if err != nil {
		return nil, err
	}
	b := &Binding[T]{Info: info}
	switch {
	case c.Dynamic != nil:
		b.Backend = &dynamicBackend[T]{info: info, client: c.Dynamic.Resource(info.GVR), fake: true}
	case c.Config != nil:
		dc, err := dynamic.NewForConfigAndClient(c.Config, c.HTTP)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", info, err)
		}
		b.Backend = &dynamicBackend[T]{info: info, client: dc.Resource(info.GVR)}
	default:
		return nil, fmt.Errorf("%s: no client serves it: set Options.Config or Options.FakeDynamic", info)
	}
	return b, nil
}

// New returns a new zero object of T.
func New[T Object]() T {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}
