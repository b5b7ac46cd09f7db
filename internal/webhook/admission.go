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
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// Admission is a validating webhook (Create, Update, Delete) or a mutating
// one (Default) for objects of T. A nil function admits its operation.
type Admission[T binding.Object] struct {
	Info    binding.Info
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

// AddAdmission serves a at its path. A second webhook of the same kind for
// the same group, version and kind is an error.
func AddAdmission[T binding.Object](s *Server, a *Admission[T]) error {
	mutating := a.Default != nil
	path := AdmissionPath(a.Info, mutating)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hooks {
		if h.Path == path {
			what := "validating"
			if mutating {
				what = "mutating"
			}
			return fmt.Errorf("a %s webhook for %s is already registered at %s", what, a.Info, path)
		}
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
		Path: path, Mutating: mutating, Operations: ops,
		Group: a.Info.GVR.Group, Version: a.Info.GVR.Version, Resource: a.Info.GVR.Resource, Namespaced: a.Info.Namespaced,
	})
	s.handle(path, a)
	return nil
}

func (a *Admission[T]) review(ctx context.Context, body []byte, log logr.Logger, m metrics.Webhook) ([]byte, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("got apiVersion %q, kind %q: want an admission.k8s.io/v1 AdmissionReview", review.APIVersion, review.Kind)
	}
	req := review.Request
	if req == nil || req.UID == "" {
		return nil, errors.New("the AdmissionReview has no request, or its request no uid")
	}
	resp := a.admit(ctx, req, log, m)
	resp.UID = req.UID
	return json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// admit answers one request: it decodes the objects into T, calls the
// function for the operation and turns its outcome into a response.
func (a *Admission[T]) admit(ctx context.Context, req *admissionv1.AdmissionRequest, log logr.Logger, m metrics.Webhook) *admissionv1.AdmissionResponse {
	what := func() string {
		return fmt.Sprintf("%s of %s %s", req.Operation, a.Info.Type, objectName(req.Namespace, req.Name))
	}
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
	decode := func(which string, raw []byte) (T, error) {
		obj := binding.New[T]()
		if len(raw) == 0 {
			return obj, fmt.Errorf("the %s request has no %s", req.Operation, which)
		}
		if err := json.Unmarshal(raw, obj); err != nil {
			return obj, fmt.Errorf("decoding the %s of %s into %s: %w", which, what(), a.Info.Type, err)
		}
		return obj, nil
	}

	var run func(context.Context) error
	var obj T
	var before []byte
	var err error
	switch op := req.Operation; {
	case a.Default != nil && (op == admissionv1.Create || op == admissionv1.Update):
		if obj, err = decode("object", req.Object.Raw); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		if before, err = json.Marshal(obj); err != nil {
			return deny(http.StatusInternalServerError, fmt.Errorf("encoding %s: %w", what(), err))
		}
		run = func(ctx context.Context) error { return a.Default(ctx, obj) }
	case op == admissionv1.Create && a.Create != nil:
		if obj, err = decode("object", req.Object.Raw); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		run = func(ctx context.Context) error { return a.Create(ctx, obj) }
	case op == admissionv1.Update && a.Update != nil:
		if obj, err = decode("object", req.Object.Raw); err != nil {
			return deny(http.StatusBadRequest, err)
		}
		old, err := decode("oldObject", req.OldObject.Raw)
		if err != nil {
			return deny(http.StatusBadRequest, err)
		}
		run = func(ctx context.Context) error { return a.Update(ctx, old, obj) }
	case op == admissionv1.Delete && a.Delete != nil:
		// The object being deleted is the old one (kubernetes#76346).
		if obj, err = decode("oldObject", req.OldObject.Raw); err != nil {
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
			resp.Patch, err = Patch(req.Object.Raw, before, after)
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

// Warn adds msg to the warnings of the admission request of ctx, if any.
func Warn(ctx context.Context, msg string) {
	if w, ok := ctx.Value(warningsKey{}).(*warnings); ok {
		w.mu.Lock()
		w.msgs = append(w.msgs, msg)
		w.mu.Unlock()
	}
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
