package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
	"github.com/typedctrl/ctrl/internal/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// widget is the tests' custom resource.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec `json:"spec"`
}

type widgetSpec struct {
	Replicas int    `json:"replicas"`
	Message  string `json:"message,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var widgetInfo = binding.Info{
	Type:       reflect.TypeFor[*widget](),
	GVR:        schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
	Kind:       "Widget",
	Namespaced: true,
}

// logs collects what a server logs.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		fmt.Fprintln(&l.b, prefix, args)
	}, funcr.Options{Verbosity: 1})
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fixture is a webhook server behind httptest, with its metrics and logs.
type fixture struct {
	*webhook.Server
	url  string
	reg  *prometheus.Registry
	logs *logs
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWebhooks(reg)
	if err != nil {
		t.Fatal(err)
	}
	l := &logs{}
	s := webhook.New(l.logger(), m)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return &fixture{Server: s, url: ts.URL, reg: reg, logs: l}
}

// post sends body to path and returns the status code and body.
func (f *fixture) post(t *testing.T, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(f.url+path, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// admit sends an AdmissionReview with req to path and returns the response.
func (f *fixture) admit(t *testing.T, path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	code, out := f.post(t, path, "application/json", body)
	if code != http.StatusOK {
		t.Fatalf("POST %s: got %d %s, want 200", path, code, out)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &review); err != nil {
		t.Fatal(err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("got review %s, want an admission.k8s.io/v1 AdmissionReview with a response", out)
	}
	if review.Response.UID != req.UID {
		t.Errorf("got uid %q, want %q", review.Response.UID, req.UID)
	}
	return review.Response
}

const (
	validatePath = "/validate-example-com-v1-widget"
	mutatePath   = "/mutate-example-com-v1-widget"
)

// request returns an AdmissionRequest for Widgets.
func request(op admissionv1.Operation, obj, old string) *admissionv1.AdmissionRequest {
	req := &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
		Resource:  metav1.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
		Namespace: "ns",
		Name:      "w",
		Operation: op,
	}
	if obj != "" {
		req.Object.Raw = []byte(obj)
	}
	if old != "" {
		req.OldObject.Raw = []byte(old)
	}
	return req
}

func widgetJSON(replicas int, message string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w"},"spec":{"replicas":%d,"message":%q}}`, replicas, message)
}

// validator denies in every way a user's function can.
func validator() *webhook.Admission[*widget] {
	return &webhook.Admission[*widget]{
		Info: widgetInfo,
		Create: func(ctx context.Context, w *widget) error {
			switch w.Spec.Message {
			case "plain":
				return errors.New("plain refusal")
			case "status":
				return apierrors.NewConflict(schema.GroupResource{Group: "example.com", Resource: "widgets"}, w.Name, errors.New("busy"))
			case "wrapped status":
				return fmt.Errorf("checking quota: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "widgets"}, w.Name, errors.New("over quota")))
			case "one field":
				return field.Required(field.NewPath("spec", "message"), "say something else")
			case "warn":
				logr.FromContextOrDiscard(ctx).Info("warning the user")
				webhook.Warn(ctx, "first warning")
				webhook.Warn(ctx, "second warning")
				return nil
			}
			var errs field.ErrorList
			if w.Spec.Replicas < 0 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "replicas"), w.Spec.Replicas, "must be at least 0"))
			}
			if w.Spec.Replicas > 10 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "replicas"), w.Spec.Replicas, "must be at most 10"))
				errs = append(errs, field.Forbidden(field.NewPath("spec", "message"), "not with so many replicas"))
			}
			return errs.ToAggregate()
		},
		Update: func(_ context.Context, old, w *widget) error {
			if w.Spec.Replicas < old.Spec.Replicas {
				return field.Invalid(field.NewPath("spec", "replicas"), w.Spec.Replicas, fmt.Sprintf("may not shrink from %d", old.Spec.Replicas))
			}
			return nil
		},
		Delete: func(_ context.Context, w *widget) error {
			if w.Spec.Message == "keep" {
				return fmt.Errorf("widget %s is marked keep", w.Name)
			}
			return nil
		},
	}
}

func TestValidation(t *testing.T) {
	f := newFixture(t)
	if err := webhook.AddAdmission(f.Server, validator()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		req          *admissionv1.AdmissionRequest
		wantAllowed  bool
		wantCode     int32
		wantReason   metav1.StatusReason
		wantMessage  string
		wantCauses   []string // field paths
		wantWarnings []string
	}{
		{name: "create allowed", req: request(admissionv1.Create, widgetJSON(3, ""), ""), wantAllowed: true},
		{name: "plain error", req: request(admissionv1.Create, widgetJSON(3, "plain"), ""),
			wantCode: 403, wantReason: metav1.StatusReasonForbidden, wantMessage: "plain refusal"},
		{name: "status error", req: request(admissionv1.Create, widgetJSON(3, "status"), ""),
			wantCode: 409, wantReason: metav1.StatusReasonConflict, wantMessage: "busy"},
		{name: "wrapped status error", req: request(admissionv1.Create, widgetJSON(3, "wrapped status"), ""),
			wantCode: 403, wantReason: metav1.StatusReasonForbidden, wantMessage: "over quota"},
		{name: "field error", req: request(admissionv1.Create, widgetJSON(3, "one field"), ""),
			wantCode: 422, wantReason: metav1.StatusReasonInvalid, wantMessage: `Widget.example.com "w" is invalid: spec.message: Required value: say something else`,
			wantCauses: []string{"spec.message"}},
		{name: "field error list", req: request(admissionv1.Create, widgetJSON(11, ""), ""),
			wantCode: 422, wantReason: metav1.StatusReasonInvalid, wantMessage: "spec.replicas: Invalid value: 11: must be at most 10",
			wantCauses: []string{"spec.replicas", "spec.message"}},
		{name: "warnings", req: request(admissionv1.Create, widgetJSON(3, "warn"), ""),
			wantAllowed: true, wantWarnings: []string{"first warning", "second warning"}},
		{name: "update sees the old object", req: request(admissionv1.Update, widgetJSON(2, ""), widgetJSON(5, "")),
			wantCode: 422, wantReason: metav1.StatusReasonInvalid, wantMessage: "may not shrink from 5", wantCauses: []string{"spec.replicas"}},
		{name: "update allowed", req: request(admissionv1.Update, widgetJSON(6, ""), widgetJSON(5, "")), wantAllowed: true},
		{name: "delete gets the stored object", req: request(admissionv1.Delete, "", widgetJSON(1, "keep")),
			wantCode: 403, wantReason: metav1.StatusReasonForbidden, wantMessage: "widget w is marked keep"},
		{name: "connect", req: request(admissionv1.Connect, "", ""), wantAllowed: true},
		{name: "wrong kind", req: func() *admissionv1.AdmissionRequest {
			r := request(admissionv1.Create, `{}`, "")
			r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
			return r
		}(), wantCode: 400, wantMessage: "this webhook admits example.com/v1 Widget, not apps/v1 Deployment"},
		{name: "object that does not decode", req: request(admissionv1.Create, `{"spec":{"replicas":"three"}}`, ""),
			wantCode: 400, wantMessage: "decoding the object of CREATE of *webhook_test.widget ns/w into *webhook_test.widget: json: cannot unmarshal string"},
		{name: "no object", req: request(admissionv1.Create, "", ""), wantCode: 400, wantMessage: "the CREATE request has no object"},
		{name: "delete without the old object", req: request(admissionv1.Delete, "", ""), wantCode: 400, wantMessage: "the DELETE request has no oldObject"},
		{name: "unknown operation", req: request("SHRED", widgetJSON(1, ""), ""), wantCode: 400, wantMessage: `unknown operation "SHRED"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.admit(t, validatePath, tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("got allowed %v (%+v), want %v", resp.Allowed, resp.Result, tt.wantAllowed)
			}
			if !reflect.DeepEqual(resp.Warnings, tt.wantWarnings) {
				t.Errorf("got warnings %q, want %q", resp.Warnings, tt.wantWarnings)
			}
			if tt.wantAllowed {
				return
			}
			s := resp.Result
			if s == nil {
				t.Fatal("got a denial without a status")
			}
			if s.Code != tt.wantCode || s.Reason != tt.wantReason || s.Status != metav1.StatusFailure {
				t.Errorf("got code %d, reason %q, status %q, want %d, %q, Failure", s.Code, s.Reason, s.Status, tt.wantCode, tt.wantReason)
			}
			if !strings.Contains(s.Message, tt.wantMessage) {
				t.Errorf("got message %q, want it to contain %q", s.Message, tt.wantMessage)
			}
			var causes []string
			if s.Details != nil {
				for _, c := range s.Details.Causes {
					causes = append(causes, c.Field)
				}
			}
			if !reflect.DeepEqual(causes, tt.wantCauses) {
				t.Errorf("got causes %q, want %q", causes, tt.wantCauses)
			}
		})
	}
	// Bad input is logged; a user's denial only at verbosity 1; the user's
	// function logs with the request's values.
	for _, want := range []string{`"msg"="denying CREATE of *webhook_test.widget ns/w"`,
		`"msg"="warning the user" "webhook"="/validate-example-com-v1-widget" "uid"="uid-1"`, "this webhook admits example.com/v1 Widget", `"msg"="denied CREATE`} {
		if !strings.Contains(f.logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, f.logs)
		}
	}
	if got := requests(f.reg, validatePath, "200"); got != float64(len(tests)) {
		t.Errorf("got %v requests with code 200, want %d", got, len(tests))
	}
}

func TestDefaulting(t *testing.T) {
	f := newFixture(t)
	err := webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo, Default: func(ctx context.Context, w *widget) error {
		switch w.Spec.Message {
		case "":
			w.Spec.Message = "hello"
			if w.Labels == nil {
				w.Labels = map[string]string{}
			}
			w.Labels["example.com/defaulted"] = "true"
			webhook.Warn(ctx, "message defaulted")
		case "deny":
			return errors.New("no defaults for you")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The request carries a field Widget does not know, and leaves out
	// replicas: the patch must neither remove the one nor add the other.
	raw := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w"},"spec":{"future":"x"}}`
	resp := f.admit(t, mutatePath, request(admissionv1.Create, raw, ""))
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("got %+v, want allowed with a JSON patch", resp)
	}
	sameJSON(t, apply(t, raw, resp.Patch),
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w","labels":{"example.com/defaulted":"true"}},"spec":{"future":"x","message":"hello"}}`)
	if !reflect.DeepEqual(resp.Warnings, []string{"message defaulted"}) {
		t.Errorf("got warnings %q, want the defaulter's", resp.Warnings)
	}

	t.Run("update", func(t *testing.T) {
		resp := f.admit(t, mutatePath, request(admissionv1.Update, widgetJSON(2, ""), widgetJSON(2, "x")))
		if !resp.Allowed || resp.Patch == nil {
			t.Fatalf("got %+v, want allowed with a patch", resp)
		}
	})
	t.Run("nothing to default", func(t *testing.T) {
		resp := f.admit(t, mutatePath, request(admissionv1.Create, widgetJSON(2, "set"), ""))
		if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
			t.Errorf("got %+v, want allowed without a patch", resp)
		}
	})
	t.Run("denied", func(t *testing.T) {
		resp := f.admit(t, mutatePath, request(admissionv1.Create, widgetJSON(2, "deny"), ""))
		if resp.Allowed || resp.Patch != nil || resp.Result.Code != 403 || resp.Result.Message != "no defaults for you" {
			t.Errorf("got %+v, want denied 403 with the defaulter's message", resp)
		}
	})
	t.Run("delete is not defaulted", func(t *testing.T) {
		resp := f.admit(t, mutatePath, request(admissionv1.Delete, "", widgetJSON(2, "")))
		if !resp.Allowed || resp.Patch != nil {
			t.Errorf("got %+v, want allowed without a patch", resp)
		}
	})
}

func TestRegistration(t *testing.T) {
	f := newFixture(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(webhook.AddAdmission(f.Server, validator()))
	must(webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo, Default: func(context.Context, *widget) error { return nil }}))
	for name, err := range map[string]error{
		"second validator": webhook.AddAdmission(f.Server, validator()),
		"second defaulter": webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo, Default: func(context.Context, *widget) error { return nil }}),
		"no function":      webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo}),
	} {
		if err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
	hooks := f.Hooks()
	want := []webhook.Hook{
		{Path: validatePath, Name: "v1.widgets.example.com", Group: "example.com", Version: "v1", Resource: "widgets", Namespaced: true, Operations: []string{"CREATE", "UPDATE", "DELETE"}},
		{Path: mutatePath, Name: "v1.widgets.example.com", Mutating: true, Group: "example.com", Version: "v1", Resource: "widgets", Namespaced: true, Operations: []string{"CREATE", "UPDATE"}},
	}
	if !reflect.DeepEqual(hooks, want) {
		t.Errorf("got hooks %+v, want %+v", hooks, want)
	}
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t)
	if err := webhook.AddAdmission(f.Server, validator()); err != nil {
		t.Fatal(err)
	}
	review := func(apiVersion, kind, request string) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q%s}`, apiVersion, kind, request))
	}
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        []byte
		wantCode    int
		wantBody    string
	}{
		{"unregistered path", "POST", "/validate-apps-v1-deployment", "application/json", review("admission.k8s.io/v1", "AdmissionReview", ""),
			404, "no webhook is registered at /validate-apps-v1-deployment"},
		{"GET", "GET", validatePath, "application/json", nil, 405, "method GET: webhooks take POST"},
		{"content type", "POST", validatePath, "text/plain", []byte("{}"), 415, `content type "text/plain": webhooks take application/json`},
		{"empty body", "POST", validatePath, "application/json", nil, 400, "request body is empty"},
		{"not JSON", "POST", validatePath, "application/json", []byte("{]"), 400, "decoding the AdmissionReview: invalid character"},
		{"v1beta1", "POST", validatePath, "application/json", review("admission.k8s.io/v1beta1", "AdmissionReview", `,"request":{"uid":"1"}`),
			400, `got apiVersion "admission.k8s.io/v1beta1", kind "AdmissionReview": want an admission.k8s.io/v1 AdmissionReview`},
		{"wrong kind of review", "POST", validatePath, "application/json", review("apiextensions.k8s.io/v1", "ConversionReview", ""),
			400, "want an admission.k8s.io/v1 AdmissionReview"},
		{"no request", "POST", validatePath, "application/json", review("admission.k8s.io/v1", "AdmissionReview", ""),
			400, "the AdmissionReview has no request"},
		{"no uid", "POST", validatePath, "application/json", review("admission.k8s.io/v1", "AdmissionReview", `,"request":{"operation":"CREATE"}`),
			400, "no uid"},
		{"bad timeout", "POST", validatePath + "?timeout=soon", "application/json", review("admission.k8s.io/v1", "AdmissionReview", ""),
			400, `timeout "soon": not a positive duration`},
		{"too large", "POST", validatePath, "application/json", bytes.Repeat([]byte(" "), 7<<20+1), 400, "over the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, f.url+tt.path, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tt.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, body, tt.wantCode, tt.wantBody)
			}
			if !strings.Contains(f.logs.String(), strings.ReplaceAll(tt.wantBody, `"`, `\"`)) {
				t.Errorf("logs lack %q", tt.wantBody)
			}
		})
	}
	if got := requests(f.reg, validatePath, "400"); got != 8 {
		t.Errorf("got %v requests with code 400, want 8", got)
	}
}

func TestPanicAndTimeout(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	var finished sync.WaitGroup
	err := webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo, Create: func(ctx context.Context, w *widget) error {
		switch w.Spec.Message {
		case "panic":
			var m map[string]int
			m["boom"]++ // a nil map write
		case "slow":
			defer finished.Done()
			<-release // ignores ctx, as a careless function would
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}

	resp := f.admit(t, validatePath, request(admissionv1.Create, widgetJSON(1, "panic"), ""))
	if resp.Allowed || resp.Result.Code != 500 || resp.Result.Reason != metav1.StatusReasonInternalError ||
		!strings.Contains(resp.Result.Message, "panic: assignment to entry in nil map [recovered]") {
		t.Errorf("got %+v, want a 500 denial naming the panic", resp.Result)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "webhook function panicked") || !strings.Contains(logs, "admission_test.go") {
		t.Errorf("logs lack the panic and its stack:\n%s", logs)
	}
	if got := metric(f.reg, "controller_runtime_webhook_panics_total", nil); got != 1 {
		t.Errorf("got %v panics counted, want 1", got)
	}
	// The server still serves.
	if resp := f.admit(t, validatePath, request(admissionv1.Create, widgetJSON(1, ""), "")); !resp.Allowed {
		t.Errorf("after a panic: got %+v, want allowed", resp.Result)
	}

	finished.Add(1)
	began := time.Now()
	resp = f.admit(t, validatePath+"?timeout=100ms", request(admissionv1.Create, widgetJSON(1, "slow"), ""))
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("a function that overruns its 100ms timeout held the request %s", took)
	}
	if resp.Allowed || resp.Result.Code != 504 || resp.Result.Reason != metav1.StatusReasonTimeout ||
		!strings.Contains(resp.Result.Message, "did not return within the request's timeout") {
		t.Errorf("got %+v, want a 504 denial", resp.Result)
	}
	close(release)
	finished.Wait()
	if got := metric(f.reg, "controller_runtime_webhook_requests_in_flight", map[string]string{"webhook": validatePath}); got != 0 {
		t.Errorf("got %v requests in flight, want 0", got)
	}
}

// metric returns the value of the series name with labels in reg, or -1
// if there is none.
func metric(reg *prometheus.Registry, name string, labels map[string]string) float64 {
	families, _ := reg.Gather()
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func requests(reg *prometheus.Registry, path, code string) float64 {
	return metric(reg, "controller_runtime_webhook_requests_total", map[string]string{"webhook": path, "code": code})
}
