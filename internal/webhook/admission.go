package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// Admission is a validating webhook (Create, Update, Delete) or a mutating
// one (Default) for objects of T. A nil function admits its operation.
type Admission[T binding.Object] struct {
	Info binding.Info
	// Path is where it is served; "" for AdmissionPath's.
	Path string
	// Name is its name in its configuration; "" for DefaultName's.
	Name    string
	Create  func(ctx context.Context, obj T) error
	Update  func(ctx context.Context, old, obj T) error
	Delete  func(ctx context.Context, obj T) error
	Default func(ctx context.Context, obj T) error
}

// AdmissionPath returns the path of T's validating or mutating webhook,
// controller-runtime's: "/validate-example-com-v1-widget".
func AdmissionPath(info binding.Info, mutating bool) string {
	prefix := "/validate-"
	if mutating {
		prefix = "/mutate-"
	}
	gvk := info.GVK()
	return prefix + strings.ReplaceAll(gvk.Group, ".", "-") + "-" + gvk.Version + "-" + strings.ToLower(gvk.Kind)
}

// DefaultName returns the name of T's webhook in its configuration:
// "v1.widgets.example.com", three segments at least, as the API server
// requires.
func DefaultName(info binding.Info) string {
	group := info.GVR.Group
	if group == "" {
		group = "core"
	}
	return info.GVR.Version + "." + info.GVR.Resource + "." + group
}

// AddAdmission serves a at its path. A second webhook of the same kind for
// the same group, version and kind is an error, and so are a path that is
// taken and a name that another webhook of the same kind has.
func AddAdmission[T binding.Object](s *Server, a *Admission[T]) error {
	mutating := a.Default != nil
	what := "validating"
	if mutating {
		what = "mutating"
	}
	path, name := a.Path, a.Name
	if path == "" {
		path = AdmissionPath(a.Info, mutating)
	}
	if name == "" {
		name = DefaultName(a.Info)
	}
	if err := checkPath(path); err != nil {
		return fmt.Errorf("%s webhook for %s: %w", what, a.Info, err)
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s webhook for %s: %w", what, a.Info, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hooks {
		switch {
		case h.Mutating == mutating && h.Group == a.Info.GVR.Group && h.Version == a.Info.GVR.Version && h.Resource == a.Info.GVR.Resource:
			return fmt.Errorf("a %s webhook for %s is already registered at %s", what, a.Info, h.Path)
		case h.Path == path:
			return fmt.Errorf("%s webhook for %s: path %s is taken by the webhook %s", what, a.Info, path, h.Name)
		case h.Mutating == mutating && h.Name == name:
			return fmt.Errorf("%s webhook for %s: another %s webhook, at %s, is named %q", what, a.Info, what, h.Path, name)
		}
	}
	if path == ConvertPath && s.conv != nil {
		return fmt.Errorf("%s webhook for %s: path %s is the conversion webhook's", what, a.Info, path)
	}
	var ops []string
	if mutating {
		ops = []string{"CREATE", "UPDATE"}
	} else {
		for _, op := range []struct {
			set  bool
			name string
		}{{a.Create != nil, "CREATE"}, {a.Update != nil, "UPDATE"}, {a.Delete != nil, "DELETE"}} {
			if op.set {
				ops = append(ops, op.name)
			}
		}
		if len(ops) == 0 {
			return fmt.Errorf("validating webhook for %s: set Create, Update or Delete", a.Info)
		}
	}
	s.hooks = append(s.hooks, Hook{
		Path: path, Name: name, Mutating: mutating, Operations: ops,
		Group: a.Info.GVR.Group, Version: a.Info.GVR.Version, Resource: a.Info.GVR.Resource, Namespaced: a.Info.Namespaced,
	})
	s.handle(path, a)
	return nil
}

// admissionReview is the part of an admission.k8s.io/v1 AdmissionReview
// that is read, with the objects as O: json.RawMessage, or T itself.
// Decoding the request's other fields (user info, options) into structs
// cost a tenth of the time of a request.
type admissionReview[O any] struct {
	metav1.TypeMeta `json:",inline"`
	Request         *admissionRequest[O] `json:"request,omitempty"`
}

type admissionRequest[O any] struct {
	requestHead
	Object    O `json:"object,omitempty"`
	OldObject O `json:"oldObject,omitempty"`
}

type requestHead struct {
	UID       types.UID               `json:"uid"`
	Kind      metav1.GroupVersionKind `json:"kind"`
	Namespace string                  `json:"namespace,omitempty"`
	Name      string                  `json:"name,omitempty"`
	Operation admissionv1.Operation   `json:"operation"`
}

// review answers an AdmissionReview. A validating webhook first decodes
// the objects straight into T, in one pass over the body; decoding them
// from json.RawMessage takes twice as long, since the bytes are scanned
// again. A defaulting webhook needs those bytes for its patch. And when the
// fast decoding fails, the review is read again the slow way, which tells
// what is wrong.
//
// Bodies are decoded as the API server decodes objects (apimachinery's
// util/json): names are case-sensitive, the last of a repeated field wins,
// integers stay integers. encoding/json matches names regardless of case,
// so an object with "replicas": 50 and "Replicas": 3 would be judged as 3
// and stored as 50.
func (a *Admission[T]) review(ctx context.Context, body []byte, log logr.Logger, m metrics.Webhook) ([]byte, error) {
	if a.Default == nil {
		var review admissionReview[T]
		if utiljson.Unmarshal(body, &review) == nil && isV1Review(review.TypeMeta) && review.Request != nil && review.Request.UID != "" {
			req := review.Request
			var zero T
			object := func(which string) (T, error) {
				obj := req.Object
				if which == "oldObject" {
					obj = req.OldObject
				}
				if any(obj) == any(zero) {
					return obj, fmt.Errorf("the %s request has no %s", req.Operation, which)
				}
				return obj, nil
			}
			return a.respond(review.TypeMeta, a.admit(ctx, &req.requestHead, object, nil, log, m), req.UID)
		}
	}
	var review admissionReview[json.RawMessage]
	if err := utiljson.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	if !isV1Review(review.TypeMeta) {
		return nil, fmt.Errorf("got apiVersion %q, kind %q: want an admission.k8s.io/v1 AdmissionReview", review.APIVersion, review.Kind)
	}
	req := review.Request
	if req == nil || req.UID == "" {
		return nil, errors.New("the AdmissionReview has no request, or its request no uid")
	}
	object := func(which string) (T, error) {
		raw := req.Object
		if which == "oldObject" {
			raw = req.OldObject
		}
		obj := binding.New[T]()
		if len(raw) == 0 || string(raw) == "null" {
			return obj, fmt.Errorf("the %s request has no %s", req.Operation, which)
		}
		if err := utiljson.Unmarshal(raw, obj); err != nil {
			return obj, fmt.Errorf("decoding the %s of %s into %s: %w", which, a.what(&req.requestHead), a.Info.Type, err)
		}
		return obj, nil
	}
	return a.respond(review.TypeMeta, a.admit(ctx, &req.requestHead, object, req.Object, log, m), req.UID)
}

func isV1Review(tm metav1.TypeMeta) bool {
	return tm.APIVersion == "admission.k8s.io/v1" && tm.Kind == "AdmissionReview"
}

func (a *Admission[T]) respond(tm metav1.TypeMeta, resp *admissionv1.AdmissionResponse, uid types.UID) ([]byte, error) {
	resp.UID = uid
	return json.Marshal(admissionv1.AdmissionReview{TypeMeta: tm, Response: resp})
}

// what names a request in messages: "CREATE of *v1.Widget ns/w".
func (a *Admission[T]) what(req *requestHead) string {
	return fmt.Sprintf("%s of %s %s", req.Operation, a.Info.Type, objectName(req.Namespace, req.Name))
}

// admit answers one request: it gets the objects in T from object, calls
// the function for the operation and turns its outcome into a response.
// raw is the request's object as sent, for a defaulting webhook's patch.
func (a *Admission[T]) admit(ctx context.Context, req *requestHead, object func(which string) (T, error), raw []byte,
	log logr.Logger, m metrics.Webhook) *admissionv1.AdmissionResponse {
	what := func() string { return a.what(req) }
	if log.GetSink() != nil { // the values cost allocations: not for a discarding logger
		log = log.WithValues("uid", req.UID)
	}
	deny := func(code int32, err error) *admissionv1.AdmissionResponse {
		log.Error(err, "denying "+what())
		return denied(metav1.Status{Code: code, Message: err.Error()})
	}
	if gvk := a.Info.GVK(); req.Kind.Group != gvk.Group || req.Kind.Version != gvk.Version || req.Kind.Kind != gvk.Kind {
		return deny(http.StatusBadRequest, fmt.Errorf("this webhook admits %s, not %s",
			gvkString(gvk.Group, gvk.Version, gvk.Kind), gvkString(req.Kind.Group, req.Kind.Version, req.Kind.Kind)))
	}
	var run func(context.Context) error
	var obj T
	var before []byte
	var err error
	switch op := req.Operation; {
	case a.Default != nil && (op == admissionv1.Create || op == admissionv1.Update):
		if obj, err = object("object"); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		if before, err = json.Marshal(obj); err != nil {
			return deny(http.StatusInternalServerError, fmt.Errorf("encoding %s: %w", what(), err))
		}
		run = func(ctx context.Context) error { return a.Default(ctx, obj) }
	case op == admissionv1.Create && a.Create != nil:
		if obj, err = object("object"); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		run = func(ctx context.Context) error { return a.Create(ctx, obj) }
	case op == admissionv1.Update && a.Update != nil:
		if obj, err = object("object"); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		old, err := object("oldObject")
		if err != nil {
			return deny(http.StatusBadRequest, err)
		}
		run = func(ctx context.Context) error { return a.Update(ctx, old, obj) }
	case op == admissionv1.Delete && a.Delete != nil:
		// The object being deleted is the old one (kubernetes#76346).
		if obj, err = object("oldObject"); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		run = func(ctx context.Context) error { return a.Delete(ctx, obj) }
	case op == admissionv1.Create || op == admissionv1.Update || op == admissionv1.Delete || op == admissionv1.Connect:
		return &admissionv1.AdmissionResponse{Allowed: true} // no function for the operation
	default:
		return deny(http.StatusBadRequest, fmt.Errorf("unknown operation %q", op))
	}

	w := &warnings{}
	err = call(logr.NewContext(context.WithValue(ctx, warningsKey{}, w), log), run)
	var p *panicError
	var resp *admissionv1.AdmissionResponse
	switch {
	case errors.As(err, &p):
		m.Panics.Inc()
		log.Error(p, "webhook function panicked; denying "+what(), "stack", string(p.stack))
		resp = denied(metav1.Status{Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
			Message: fmt.Sprintf("%s: %v", what(), p)})
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: the webhook function did not return within the request's timeout: %w", what(), context.Cause(ctx))
		log.Error(err, "denying "+what())
		resp = denied(metav1.Status{Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout, Message: err.Error()})
	case err != nil:
		name := req.Name
		if name == "" {
			name = obj.GetName()
		}
		resp = denied(statusOf(err, a.Info, name))
		log.V(1).Info("denied "+what(), "code", resp.Result.Code, "message", resp.Result.Message)
	case a.Default != nil:
		resp = &admissionv1.AdmissionResponse{Allowed: true}
		after, err := json.Marshal(obj)
		if err == nil && !bytes.Equal(before, after) {
			resp.Patch, err = Patch(raw, before, after)
		}
		if err != nil {
			return deny(http.StatusInternalServerError, fmt.Errorf("computing the patch of %s: %w", what(), err))
		}
		if resp.Patch != nil {
			pt := admissionv1.PatchTypeJSONPatch
			resp.PatchType = &pt
		}
	default:
		resp = &admissionv1.AdmissionResponse{Allowed: true}
	}
	resp.Warnings = w.list()
	return resp
}

// statusOf turns a user function's error into the status of a denial: an
// API status error as it is (apierrors.NewInvalid, NewForbidden, ...); field
// errors (a *field.Error, or the aggregate of a field.ErrorList's
// ToAggregate) as an Invalid error with a cause per field, which kubectl
// lists; any other error as 403 Forbidden with its message, as
// controller-runtime does.
func statusOf(err error, info binding.Info, name string) metav1.Status {
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		s := apiStatus.Status()
		if s.Code == 0 {
			s.Code = http.StatusForbidden
		}
		return s
	}
	if list := fieldErrors(err); list != nil {
		return apierrors.NewInvalid(info.GVK().GroupKind(), name, list).Status()
	}
	return metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: err.Error()}
}

// fieldErrors returns the field errors err consists of, or nil if it is
// something else.
func fieldErrors(err error) field.ErrorList {
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		var list field.ErrorList
		for _, e := range agg.Errors() {
			var fe *field.Error
			if !errors.As(e, &fe) {
				return nil
			}
			list = append(list, fe)
		}
		return list
	}
	var fe *field.Error
	if errors.As(err, &fe) {
		return field.ErrorList{fe}
	}
	return nil
}

func denied(s metav1.Status) *admissionv1.AdmissionResponse {
	s.Status = metav1.StatusFailure
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &s}
}

// warnings collect the warnings of one request; a user's function may add
// them from goroutines of its own, even after its request timed out.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

type warningsKey struct{}

// Warn adds msg to the warnings of the admission request of ctx, and
// reports whether ctx belongs to one.
func Warn(ctx context.Context, msg string) bool {
	w, ok := ctx.Value(warningsKey{}).(*warnings)
	if ok {
		w.mu.Lock()
		w.msgs = append(w.msgs, msg)
		w.mu.Unlock()
	}
	return ok
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

func objectName(namespace, name string) string {
	if name == "" {
		name = "(name to be generated)"
	}
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func gvkString(group, version, kind string) string {
	if group == "" {
		return version + " " + kind
	}
	return group + "/" + version + " " + kind
}

// checkPath checks a webhook's path: an absolute URL path, which the API
// server appends to the service or URL of the configuration.
func checkPath(path string) error {
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?# ") {
		return fmt.Errorf("path %q: want an absolute URL path, such as /validate-example-com-v1-widget", path)
	}
	return nil
}

// checkName checks a webhook's name as the API server does: a DNS
// subdomain of three segments at least, such as vwidget.kb.io.
func checkName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || strings.Count(name, ".") < 2 {
		return fmt.Errorf("name %q: want a DNS subdomain of three segments at least, such as vwidget.kb.io", name)
	}
	return nil
}
