package binding

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/builtin"
)

// Projections: a binding whose type is not what the server sends. The
// server sends objects of a source type (a registered or built-in type, or
// PartialObjectMetadata when asked for metadata only); the binding turns
// each into its own type with Project. Lists are turned as they are
// decoded; watch events are turned by the cache's store, so that the
// stream needs no goroutine of its own, and a streamed initial list by the
// reflector's transform, so that its full objects never accumulate.

// projection is a registered projection: how to make its binding.
type projection struct {
	source reflect.Type
	fields string                       // the fields it reads, joined, to compare registrations
	bind   func(c Clients) (any, error) // *Binding[P]
	info   func() (Info, error)
}

var projections sync.Map // reflect.Type of P -> projection

// RegisterProjection records that P is fn applied to the objects of S, and
// that fn reads of S only its metadata and the fields named by their JSON
// paths in fields ("spec.nodeName", "status.conditions"); no fields: all
// of them. Registering P again with the same source and fields does
// nothing; with others it is an error. Built-in and registered types
// cannot be projections; fields are for projections of built-in types,
// whose objects travel as protobuf and can be decoded in part.
func RegisterProjection[S, P Object](fn func(S) P, fields ...string) error {
	s, p := reflect.TypeFor[S](), reflect.TypeFor[P]()
	if p.Kind() != reflect.Pointer || p.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("project %s: the projection must be a pointer to a struct", p)
	}
	if _, err := Lookup[P](); err == nil {
		return fmt.Errorf("project %s: it is an API type of its own", p)
	}
	if len(fields) > 0 {
		if _, ok := builtin.Lookup(s); !ok {
			return fmt.Errorf("project %s: fields name what to decode of a built-in type's protobuf; %s travels as JSON, decoded whole", p, s)
		}
		if _, err := fieldsetFor(s, fields, false); err != nil {
			return fmt.Errorf("project %s: %w", p, err)
		}
	}
	pr := projection{source: s, fields: strings.Join(fields, ","), bind: func(c Clients) (any, error) { return bindProjection[S, P](c, fn, fields) },
		info: func() (Info, error) {
			info, err := InfoFor[S](nil)
			info.Type, info.Status, info.Projection = p, false, s
			return info, err
		}}
	if prev, loaded := projections.LoadOrStore(p, pr); loaded && (prev.(projection).source != s || prev.(projection).fields != pr.fields) {
		return fmt.Errorf("project %s: already a projection of %s reading fields %q", p, prev.(projection).source, prev.(projection).fields)
	}
	return nil
}

// InfoFor resolves T (and res, for the types that serve any resource)
// without binding it to a client.
func InfoFor[T Object](res *Info) (Info, error) {
	t := reflect.TypeFor[T]()
	switch t {
	case unstructuredType, metadataType:
		if res == nil || res.GVR.Version == "" || res.GVR.Resource == "" || res.Kind == "" {
			return Info{}, fmt.Errorf("%s: set the Resource option's Version, Resource and Kind to say which resource it holds", t)
		}
		info := *res
		info.Type, info.Watchable = t, true
		_, info.Builtin = builtin.LookupGVR(info.GVR)
		if t == metadataType {
			info.StatusUnknown = true // metadata has none, whatever the resource has
		}
		info, err := resolved(info, nil)
		if t == metadataType {
			info.Status, info.StatusUnknown = false, false
		}
		return info, err
	}
	if res != nil {
		return Info{}, fmt.Errorf("%s names its resource: a Resource option is for *unstructured.Unstructured and *v1.PartialObjectMetadata only", t)
	}
	if pr, ok := projections.Load(t); ok {
		return pr.(projection).info()
	}
	return Lookup[T]()
}

func bindProjection[S, P Object](c Clients, fn func(S) P, fields []string) (*Binding[P], error) {
	src, err := For[S](c, nil)
	if err != nil {
		return nil, err
	}
	info := src.Info
	info.Type, info.Status, info.Projection = reflect.TypeFor[P](), false, src.Type
	project := func(obj any) (P, bool) {
		s, ok := obj.(S)
		if !ok {
			var zero P
			return zero, false
		}
		return fn(s), true
	}
	b := &Binding[P]{
		Info:    info,
		Backend: &projecting[S, P]{src: src.Backend, project: project},
		Project: project,
	}
	if rb, ok := src.Backend.(*restBackend[S]); ok {
		// The watch sends P itself, decoded from the protobuf of S (or S,
		// from JSON, which the store projects).
		b.Stream = func(ctx context.Context, namespace string, opts metav1.ListOptions, so StreamOptions) (watch.Interface, error) {
			if !rb.info.Builtin {
				return rb.stream(ctx, namespace, opts, so)
			}
			fs, err := fieldsetFor(src.Type, fields, so.KeepManagedFields)
			if err != nil {
				return nil, err
			}
			whole, err := fieldsetFor(src.Type, nil, so.KeepManagedFields)
			if err != nil {
				return nil, err
			}
			body, err := rb.open(ctx, namespace, opts)
			if err != nil {
				return nil, err
			}
			dec := projectingDecoder(fs, fn)
			if len(fields) > 0 && so.Report != nil {
				dec = checkedOnce(dec, protoDecoder[S](whole), fn, so.Report)
			}
			return newStream(body, rb.codec, rb.info.GVK(), dec), nil
		}
	}
	return b, nil
}

// ErrReadOnly is returned by the writes of a projection's binding.
var ErrReadOnly = errors.New("a projection is read-only: write through a client of the type it projects")

// projecting serves P from S's backend: reads are projected, writes refused.
type projecting[S, P Object] struct {
	src     Backend[S]
	project func(any) (P, bool)
}

func (b *projecting[S, P]) Fake() bool { return b.src.Fake() }

func (b *projecting[S, P]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (P, error) {
	s, err := b.src.Get(ctx, namespace, name, opts)
	if err != nil {
		var zero P
		return zero, err
	}
	p, _ := b.project(s)
	return p, nil
}

func (b *projecting[S, P]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[P], error) {
	l, err := b.src.List(ctx, namespace, opts)
	if err != nil {
		return nil, err
	}
	out := &List[P]{TypeMeta: l.TypeMeta, ListMeta: l.ListMeta, Items: make([]P, len(l.Items))}
	for i, s := range l.Items {
		out.Items[i], _ = b.project(s)
		l.Items[i] = *new(S) // let the full object go as soon as it is projected
	}
	return out, nil
}

// Watch sends the source's objects: the store projects them.
func (b *projecting[S, P]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return b.src.Watch(ctx, namespace, opts)
}

func (b *projecting[S, P]) Create(context.Context, P, metav1.CreateOptions) (P, error) {
	var zero P
	return zero, ErrReadOnly
}

func (b *projecting[S, P]) Update(context.Context, P, metav1.UpdateOptions) (P, error) {
	var zero P
	return zero, ErrReadOnly
}

func (b *projecting[S, P]) UpdateStatus(context.Context, P, metav1.UpdateOptions) (P, error) {
	var zero P
	return zero, ErrReadOnly
}

func (b *projecting[S, P]) Patch(context.Context, string, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (P, error) {
	var zero P
	return zero, ErrReadOnly
}

func (b *projecting[S, P]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return ErrReadOnly
}

// metadataType is the type of metadata-only objects.
var metadataType = reflect.TypeFor[*metav1.PartialObjectMetadata]()

// MetadataType and UnstructuredType are the types that serve a resource
// named at run time.
var MetadataType, UnstructuredType = metadataType, unstructuredType

// forMetadata binds *metav1.PartialObjectMetadata to the resource res: the
// server sends metadata only (client-go's metadata client, as protobuf).
// Fakes serve it from the typed fake or the dynamic fake, turning their
// full objects into metadata.
func forMetadata[T Object](c Clients, res *Info) (*Binding[T], error) {
	if res == nil || res.GVR.Version == "" || res.GVR.Resource == "" || res.Kind == "" {
		return nil, fmt.Errorf("%s: set the Resource option's Version, Resource and Kind to say which resource it holds", metadataType)
	}
	info := *res
	info.Type, info.Watchable = metadataType, true
	_, info.Builtin = builtin.LookupGVR(info.GVR)
	fake := info.Builtin && c.Clientset != nil || !info.Builtin && c.Dynamic != nil
	var d Discover
	if !fake {
		d = c.Discover
	}
	info.StatusUnknown = true // metadata has none, whatever the resource has
	info, err := resolved(info, d)
	if err != nil {
		return nil, err
	}
	info.Status, info.StatusUnknown = false, false
	toT := func(obj any) (T, bool) {
		var zero T
		if t, ok := obj.(T); ok {
			return t, true
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return zero, false
		}
		pom := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
			Generation: m.GetGeneration(), CreationTimestamp: m.GetCreationTimestamp(), DeletionTimestamp: m.GetDeletionTimestamp(),
			DeletionGracePeriodSeconds: m.GetDeletionGracePeriodSeconds(), Labels: m.GetLabels(), Annotations: m.GetAnnotations(),
			OwnerReferences: m.GetOwnerReferences(), Finalizers: m.GetFinalizers(), ManagedFields: m.GetManagedFields(),
		}}
		pom.SetGroupVersionKind(info.GVK())
		return any(pom).(T), true
	}
	b := &Binding[T]{Info: info}
	switch {
	case info.Builtin && c.Clientset != nil, !info.Builtin && c.Dynamic != nil:
		// A fake sends full objects of a Go type known only to it: the
		// store turns them into metadata.
		f := &fakeMetadata[T]{info: info, toT: toT}
		if info.Builtin {
			f.fake = c.Clientset
		} else {
			f.dynamic = c.Dynamic.Resource(info.GVR)
		}
		b.Backend, b.Project = f, toT
	case c.Config != nil:
		mc, err := metadata.NewForConfigAndClient(c.Config, c.HTTP)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", info, err)
		}
		// The watch is read by a Stream over a client configured as the
		// metadata client configures its own.
		cfg := metadata.ConfigFor(c.Config)
		cfg.GroupVersion, cfg.APIPath = &schema.GroupVersion{}, "/this-value-should-never-be-sent"
		rc, err := rest.RESTClientForConfigAndClient(cfg, c.HTTP)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", info, err)
		}
		mb := &metadataBackend[T]{info: info, client: mc.Resource(info.GVR), rest: rc, codec: cfg.NegotiatedSerializer}
		b.Backend, b.Stream = mb, mb.stream
	default:
		return nil, fmt.Errorf("%s: no client serves it: set Options.Config, or the fakes", info)
	}
	return b, nil
}

// metadataBackend serves PartialObjectMetadata from a real API server.
type metadataBackend[T Object] struct {
	info   Info
	client metadata.Getter
	rest   *rest.RESTClient // for watches
	codec  runtime.NegotiatedSerializer
}

func (b *metadataBackend[T]) Fake() bool { return false }

func (b *metadataBackend[T]) ri(namespace string) metadata.ResourceInterface {
	if !b.info.Namespaced {
		return b.client
	}
	return b.client.Namespace(namespace)
}

func (b *metadataBackend[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	m, err := b.ri(namespace).Get(ctx, name, opts)
	return any(m).(T), err
}

func (b *metadataBackend[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[T], error) {
	l, err := b.ri(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &List[T]{TypeMeta: l.TypeMeta, ListMeta: l.ListMeta, Items: make([]T, len(l.Items))}
	for i := range l.Items {
		out.Items[i] = any(&l.Items[i]).(T)
	}
	return out, nil
}

// Watch opens a Stream that decodes whole metadata.
func (b *metadataBackend[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return b.stream(ctx, namespace, opts, StreamOptions{KeepManagedFields: true})
}

// metadataAccept asks for metadata only, as client-go's metadata client does.
const metadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// metadataParams encodes ListOptions as the metadata client does.
var metadataParams = func() runtime.ParameterCodec {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return runtime.NewParameterCodec(s)
}()

func (b *metadataBackend[T]) stream(ctx context.Context, namespace string, opts metav1.ListOptions, so StreamOptions) (watch.Interface, error) {
	fs, err := fieldsetFor(metadataType, nil, so.KeepManagedFields)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	opts.Watch = true
	path := []string{"api"}
	if b.info.GVR.Group != "" {
		path = []string{"apis", b.info.GVR.Group}
	}
	path = append(path, b.info.GVR.Version)
	if b.info.Namespaced && namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	body, err := b.rest.Get().
		AbsPath(append(path, b.info.GVR.Resource)...).
		SetHeader("Accept", metadataAccept).
		SpecificallyVersionedParams(&opts, metadataParams, schema.GroupVersion{Version: "v1"}).
		Timeout(timeout).
		Throttle(nil).
		Stream(ctx)
	if err != nil {
		return nil, err
	}
	return newStream(body, b.codec, metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"), protoDecoder[T](fs)), nil
}

func (b *metadataBackend[T]) Create(context.Context, T, metav1.CreateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *metadataBackend[T]) Update(context.Context, T, metav1.UpdateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *metadataBackend[T]) UpdateStatus(context.Context, T, metav1.UpdateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *metadataBackend[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	m, err := b.ri(namespace).Patch(ctx, name, pt, data, opts, subresources...)
	return any(m).(T), err
}

func (b *metadataBackend[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return b.ri(namespace).Delete(ctx, name, opts)
}

// ErrMetadataOnly is returned by the writes metadata cannot make.
var ErrMetadataOnly = errors.New("metadata only: patch or delete it, or write through a client of its full type")
