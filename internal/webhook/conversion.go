package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// ConvertPath is where the conversion webhook is served, as in
// controller-runtime.
const ConvertPath = "/convert"

// ConversionReview is apiextensions.k8s.io/v1 ConversionReview, declared
// here with upstream's JSON names so that ctrl does not depend on the
// apiextensions module.
type ConversionReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *ConversionRequest  `json:"request,omitempty"`
	Response        *ConversionResponse `json:"response,omitempty"`
}

// ConversionRequest asks for objects in another version.
type ConversionRequest struct {
	UID               types.UID              `json:"uid"`
	DesiredAPIVersion string                 `json:"desiredAPIVersion"`
	Objects           []runtime.RawExtension `json:"objects"`
}

// ConversionResponse holds the converted objects, in the order of the
// request's, or the reason for failing.
type ConversionResponse struct {
	UID              types.UID              `json:"uid"`
	ConvertedObjects []runtime.RawExtension `json:"convertedObjects"`
	Result           metav1.Status          `json:"result"`
}

// Converter converts custom resources between the Go types of their
// versions, through the registered pairs: directly, or along the shortest
// chain of pairs, such as through a hub version. Objects keep their
// metadata: each step starts from a copy of the source's, and a conversion
// that changes the name, namespace or uid fails.
type Converter struct {
	mu    sync.RWMutex // registrations write, reviews read
	types map[schema.GroupVersionKind]*version
}

type version struct {
	info   binding.Info
	decode func([]byte) (binding.Object, error)
	edges  []edge
}

type edge struct {
	to      *version
	convert func(context.Context, binding.Object) (binding.Object, error)
}

// Conversion is a registered custom resource, for its CRD's conversion
// stanza.
type Conversion struct {
	Group, Resource string
}

// Conversions returns the custom resources with a registered conversion,
// one per resource, sorted.
func (s *Server) Conversions() []Conversion {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Conversion
	if s.conv != nil {
		s.conv.mu.RLock()
		defer s.conv.mu.RUnlock()
		for _, v := range s.conv.types {
			c := Conversion{Group: v.info.GVR.Group, Resource: v.info.GVR.Resource}
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b Conversion) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
	})
	return out
}

// AddConversion registers the conversions between A and B, two versions of
// one custom resource: ab converts an A into a B, ba back. Each is called
// with the request's context, which carries its logger, and a new
// destination object that carries a copy of the source's metadata, for the
// function to fill in the rest.
func AddConversion[A, B binding.Object](s *Server, a, b binding.Info, ab func(context.Context, A, B) error, ba func(context.Context, B, A) error) error {
	switch {
	case a.Builtin || b.Builtin:
		return fmt.Errorf("conversion between %s and %s: only custom resources are converted by webhooks", a, b)
	case a.GVR.Group != b.GVR.Group || a.GVR.Resource != b.GVR.Resource || a.Kind != b.Kind:
		return fmt.Errorf("conversion between %s and %s: not two versions of one resource (group, resource and kind must be equal)", a, b)
	case a.GVR.Version == b.GVR.Version:
		return fmt.Errorf("conversion between %s and %s: both are version %s", a, b, a.GVR.Version)
	case ab == nil || ba == nil:
		return fmt.Errorf("conversion between %s and %s: both directions are needed", a, b)
	}
	for _, obj := range []binding.Object{binding.New[A](), binding.New[B]()} {
		if objectMeta(obj) == nil {
			return fmt.Errorf("conversion between %s and %s: %T does not embed metav1.ObjectMeta", a, b, obj)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv
	if c == nil {
		for _, h := range s.hooks {
			if h.Path == ConvertPath {
				return fmt.Errorf("conversion between %s and %s: path %s is taken by the webhook %s", a, b, ConvertPath, h.Name)
			}
		}
		c = &Converter{types: map[schema.GroupVersionKind]*version{}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, info := range []binding.Info{a, b} {
		if v, ok := c.types[info.GVK()]; ok && v.info.Type != info.Type {
			return fmt.Errorf("conversion between %s and %s: %s is already converted as %s", a, b, info.GVK(), v.info.Type)
		}
	}
	va, vb := c.version(a, decoder[A]()), c.version(b, decoder[B]())
	for _, e := range va.edges {
		if e.to == vb {
			return fmt.Errorf("conversion between %s and %s: already registered", a, b)
		}
	}
	va.edges = append(va.edges, edge{to: vb, convert: step(b, ab)})
	vb.edges = append(vb.edges, edge{to: va, convert: step(a, ba)})
	if s.conv == nil {
		s.conv = c
		s.handle(ConvertPath, c)
	}
	return nil
}

// version returns the vertex of info, adding it if new.
func (c *Converter) version(info binding.Info, decode func([]byte) (binding.Object, error)) *version {
	v, ok := c.types[info.GVK()]
	if !ok {
		v = &version{info: info, decode: decode}
		c.types[info.GVK()] = v
	}
	return v
}

// decoder decodes an object as the API server does (see Admission.review).
func decoder[T binding.Object]() func([]byte) (binding.Object, error) {
	return func(raw []byte) (binding.Object, error) {
		obj := binding.New[T]()
		return obj, utiljson.Unmarshal(raw, obj)
	}
}

// step wraps a typed conversion into B, described by to.
func step[A, B binding.Object](to binding.Info, f func(context.Context, A, B) error) func(context.Context, binding.Object) (binding.Object, error) {
	gvk := to.GVK()
	return func(ctx context.Context, src binding.Object) (binding.Object, error) {
		dst := binding.New[B]()
		objectMeta(src).DeepCopyInto(objectMeta(dst))
		if err := f(ctx, src.(A), dst); err != nil {
			return nil, err
		}
		dst.GetObjectKind().SetGroupVersionKind(gvk)
		return dst, nil
	}
}

// objectMeta returns the metav1.ObjectMeta that obj embeds, or nil.
func objectMeta(obj binding.Object) *metav1.ObjectMeta {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m, _ := a.GetObjectMeta().(*metav1.ObjectMeta)
		return m
	}
	return nil
}

// path returns the steps from one version to another: breadth first, so
// the shortest chain.
func (c *Converter) path(from, to *version) []edge {
	type hop struct {
		from *version
		step edge
	}
	prev := map[*version]hop{}
	seen := map[*version]bool{from: true}
	queue := []*version{from}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if v == to {
			var steps []edge
			for v != from {
				h := prev[v]
				steps = append(steps, h.step)
				v = h.from
			}
			slices.Reverse(steps)
			return steps
		}
		for _, e := range v.edges {
			if !seen[e.to] {
				seen[e.to] = true
				prev[e.to] = hop{from: v, step: e}
				queue = append(queue, e.to)
			}
		}
	}
	return nil
}

func (c *Converter) review(ctx context.Context, body []byte, log logr.Logger, m metrics.Webhook) ([]byte, error) {
	var review ConversionReview
	if err := utiljson.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decoding the ConversionReview: %w", err)
	}
	if review.APIVersion != "apiextensions.k8s.io/v1" || review.Kind != "ConversionReview" {
		return nil, fmt.Errorf("got apiVersion %q, kind %q: want an apiextensions.k8s.io/v1 ConversionReview", review.APIVersion, review.Kind)
	}
	req := review.Request
	if req == nil || req.UID == "" {
		return nil, errors.New("the ConversionReview has no request, or its request no uid")
	}
	desired, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil {
		return nil, fmt.Errorf("desiredAPIVersion %q: %w", req.DesiredAPIVersion, err)
	}
	resp := &ConversionResponse{UID: req.UID}
	if log.GetSink() != nil { // the values cost allocations: not for a discarding logger
		log = log.WithValues("uid", req.UID)
	}
	var out []runtime.RawExtension
	err = call(logr.NewContext(ctx, log), func(ctx context.Context) error {
		c.mu.RLock()
		defer c.mu.RUnlock()
		out = make([]runtime.RawExtension, len(req.Objects))
		for i, o := range req.Objects {
			raw, err := c.convert(ctx, o.Raw, desired)
			if err != nil {
				return err
			}
			out[i].Raw = raw
		}
		return nil
	})
	var p *panicError
	switch {
	case errors.As(err, &p):
		m.Panics.Inc()
		log.Error(p, "conversion function panicked", "stack", string(p.stack))
	case ctx.Err() != nil:
		err = fmt.Errorf("the conversion did not finish within the request's timeout: %w", context.Cause(ctx))
		log.Error(err, "conversion failed")
	case err != nil:
		log.Error(err, "conversion failed")
	}
	if err != nil {
		resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
	} else {
		resp.ConvertedObjects, resp.Result = out, metav1.Status{Status: metav1.StatusSuccess}
	}
	return json.Marshal(ConversionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// convert converts one object into the desired version of its kind.
func (c *Converter) convert(ctx context.Context, raw []byte, desired schema.GroupVersion) ([]byte, error) {
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Namespace string    `json:"namespace"`
			Name      string    `json:"name"`
			UID       types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := utiljson.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("decoding an object to convert: %w", err)
	}
	from := head.GroupVersionKind()
	to := desired.WithKind(head.Kind)
	if from == to {
		return raw, nil
	}
	name := objectName(head.Metadata.Namespace, head.Metadata.Name)
	src, ok := c.types[from]
	if !ok {
		return nil, fmt.Errorf("%s %s: no conversion is registered for %s", head.Kind, name, gvkString(from.Group, from.Version, from.Kind))
	}
	dst, ok := c.types[to]
	if !ok {
		return nil, fmt.Errorf("%s %s: no conversion is registered for %s", head.Kind, name, gvkString(to.Group, to.Version, to.Kind))
	}
	steps := c.path(src, dst)
	if steps == nil {
		return nil, fmt.Errorf("%s %s: no chain of registered conversions leads from %s to %s", head.Kind, name, src.info, dst.info)
	}
	obj, err := src.decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: decoding into %s: %w", head.Kind, name, src.info.Type, err)
	}
	at := src
	for _, e := range steps {
		if obj, err = e.convert(ctx, obj); err != nil {
			return nil, fmt.Errorf("%s %s: converting %s to %s: %w", head.Kind, name, at.info, e.to.info, err)
		}
		at = e.to
	}
	m := head.Metadata
	if obj.GetName() != m.Name || obj.GetNamespace() != m.Namespace || obj.GetUID() != m.UID {
		return nil, fmt.Errorf("%s %s: converting %s to %s changed the name, namespace or uid to %s (uid %q, was %q)",
			head.Kind, name, src.info, dst.info, objectName(obj.GetNamespace(), obj.GetName()), obj.GetUID(), m.UID)
	}
	return json.Marshal(obj)
}
