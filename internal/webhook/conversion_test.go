package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/webhook"
)

// alphaWidget is example.com/v1alpha1 Widget: a size and a color, where v1
// has replicas and a message and no color.
type alphaWidget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Size  int    `json:"size"`
		Color string `json:"color,omitempty"`
	} `json:"spec"`
}

func (w *alphaWidget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// betaWidget is example.com/v2 Widget: a count, a message and a color.
type betaWidget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Count   int    `json:"count"`
		Message string `json:"message,omitempty"`
		Color   string `json:"color,omitempty"`
	} `json:"spec"`
}

func (w *betaWidget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func infoOf[T binding.Object](version string) binding.Info {
	i := widgetInfo
	i.Type = reflect.TypeFor[T]()
	i.GVR.Version = version
	return i
}

var (
	alphaInfo = infoOf[*alphaWidget]("v1alpha1")
	betaInfo  = infoOf[*betaWidget]("v2")
)

// Fields a version lacks travel in these annotations.
const (
	colorAnnotation   = "example.com/color"
	messageAnnotation = "example.com/message"
)

// keep moves value into annotation key of m if it is set, and returns what
// m held there, removing it.
func keep(m *metav1.ObjectMeta, key, value string) {
	if value == "" {
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[key] = value
}

func take(m *metav1.ObjectMeta, key string) string {
	v := m.Annotations[key]
	delete(m.Annotations, key)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	return v
}

func alphaToV1(_ context.Context, src *alphaWidget, dst *widget) error {
	if src.Spec.Size < 0 {
		return fmt.Errorf("size %d is negative", src.Spec.Size)
	}
	if src.Spec.Color == "rename" {
		dst.Name = "renamed"
	}
	if src.Spec.Color == "panic" {
		panic("conversion exploded")
	}
	dst.Spec.Replicas = src.Spec.Size
	dst.Spec.Message = take(&dst.ObjectMeta, messageAnnotation)
	keep(&dst.ObjectMeta, colorAnnotation, src.Spec.Color)
	return nil
}

func v1ToAlpha(_ context.Context, src *widget, dst *alphaWidget) error {
	dst.Spec.Size = src.Spec.Replicas
	dst.Spec.Color = take(&dst.ObjectMeta, colorAnnotation)
	keep(&dst.ObjectMeta, messageAnnotation, src.Spec.Message)
	return nil
}

func betaToV1(_ context.Context, src *betaWidget, dst *widget) error {
	dst.Spec.Replicas, dst.Spec.Message = src.Spec.Count, src.Spec.Message
	keep(&dst.ObjectMeta, colorAnnotation, src.Spec.Color)
	return nil
}

func v1ToBeta(_ context.Context, src *widget, dst *betaWidget) error {
	dst.Spec.Count, dst.Spec.Message = src.Spec.Replicas, src.Spec.Message
	dst.Spec.Color = take(&dst.ObjectMeta, colorAnnotation)
	return nil
}

// converter returns a fixture converting v1alpha1 and v2 Widgets through
// the v1 hub.
func converter(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	if err := webhook.AddConversion(f.Server, alphaInfo, widgetInfo, alphaToV1, v1ToAlpha); err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddConversion(f.Server, betaInfo, widgetInfo, betaToV1, v1ToBeta); err != nil {
		t.Fatal(err)
	}
	return f
}

// convert sends objects to the conversion webhook and returns the response.
func (f *fixture) convert(t *testing.T, desired string, objects ...string) *webhook.ConversionResponse {
	t.Helper()
	req := &webhook.ConversionRequest{UID: "conv-1", DesiredAPIVersion: desired}
	for _, o := range objects {
		req.Objects = append(req.Objects, runtime.RawExtension{Raw: []byte(o)})
	}
	body, err := json.Marshal(webhook.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	code, out := f.post(t, "/convert", "application/json", body)
	if code != http.StatusOK {
		t.Fatalf("got %d %s, want 200", code, out)
	}
	var review webhook.ConversionReview
	if err := json.Unmarshal(out, &review); err != nil {
		t.Fatal(err)
	}
	if review.APIVersion != "apiextensions.k8s.io/v1" || review.Kind != "ConversionReview" || review.Response == nil || review.Response.UID != "conv-1" {
		t.Fatalf("got %s, want a ConversionReview answering conv-1", out)
	}
	return review.Response
}

// meta is metadata that every conversion must keep.
var meta = `"metadata":{"namespace":"ns","name":"w","uid":"u-1","resourceVersion":"42","generation":3,` +
	`"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"x"},"annotations":{"note":"keep me"},"finalizers":["f"]}`

func TestConversion(t *testing.T) {
	f := converter(t)
	alpha := `{"apiVersion":"example.com/v1alpha1","kind":"Widget",` + meta + `,"spec":{"size":3,"color":"red"}}`
	v1 := `{"apiVersion":"example.com/v1","kind":"Widget",` + meta + `,"spec":{"replicas":4,"message":"hi"}}`
	beta := `{"apiVersion":"example.com/v2","kind":"Widget",` + meta + `,"spec":{"count":5,"message":"yo","color":"blue"}}`
	withNote := func(extra string) string {
		return `"metadata":{"namespace":"ns","name":"w","uid":"u-1","resourceVersion":"42","generation":3,` +
			`"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"x"},"annotations":{"note":"keep me"` + extra + `},"finalizers":["f"]}`
	}
	tests := []struct {
		name    string
		desired string
		in      []string
		want    []string
	}{
		{"to the hub", "example.com/v1", []string{alpha},
			[]string{`{"apiVersion":"example.com/v1","kind":"Widget",` + withNote(`,"example.com/color":"red"`) + `,"spec":{"replicas":3}}`}},
		{"from the hub", "example.com/v1alpha1", []string{v1},
			[]string{`{"apiVersion":"example.com/v1alpha1","kind":"Widget",` + withNote(`,"example.com/message":"hi"`) + `,"spec":{"size":4}}`}},
		{"spoke to spoke through the hub", "example.com/v2", []string{alpha},
			[]string{`{"apiVersion":"example.com/v2","kind":"Widget",` + meta + `,"spec":{"count":3,"color":"red"}}`}},
		{"several objects of several versions, in order", "example.com/v1alpha1", []string{beta, alpha, v1},
			[]string{
				`{"apiVersion":"example.com/v1alpha1","kind":"Widget",` + withNote(`,"example.com/message":"yo"`) + `,"spec":{"size":5,"color":"blue"}}`,
				alpha,
				`{"apiVersion":"example.com/v1alpha1","kind":"Widget",` + withNote(`,"example.com/message":"hi"`) + `,"spec":{"size":4}}`,
			}},
		{"nothing to convert", "example.com/v1", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.convert(t, tt.desired, tt.in...)
			if resp.Result.Status != metav1.StatusSuccess {
				t.Fatalf("got result %+v, want Success", resp.Result)
			}
			if len(resp.ConvertedObjects) != len(tt.want) {
				t.Fatalf("got %d objects, want %d", len(resp.ConvertedObjects), len(tt.want))
			}
			for i, o := range resp.ConvertedObjects {
				sameJSON(t, string(o.Raw), tt.want[i])
			}
		})
	}

	// Every version, there and back through every other: nothing lost.
	for _, start := range []string{alpha, v1, beta} {
		for _, via := range []string{"example.com/v1alpha1", "example.com/v1", "example.com/v2"} {
			var head metav1.TypeMeta
			_ = json.Unmarshal([]byte(start), &head)
			there := f.convert(t, via, start)
			back := f.convert(t, head.APIVersion, string(there.ConvertedObjects[0].Raw))
			sameJSON(t, string(back.ConvertedObjects[0].Raw), start)
		}
	}
}

func TestConversionFailures(t *testing.T) {
	f := converter(t)
	alpha := func(spec string) string {
		return `{"apiVersion":"example.com/v1alpha1","kind":"Widget",` + meta + `,"spec":` + spec + `}`
	}
	tests := []struct {
		name    string
		desired string
		in      string
		want    string
	}{
		{"the function fails", "example.com/v1", alpha(`{"size":-1}`),
			"Widget ns/w: converting *webhook_test.alphaWidget (widgets.example.com/v1alpha1) to *webhook_test.widget (widgets.example.com/v1): size -1 is negative"},
		{"the function renames", "example.com/v1", alpha(`{"size":1,"color":"rename"}`),
			"changed the name, namespace or uid to ns/renamed"},
		{"the function panics", "example.com/v1", alpha(`{"size":1,"color":"panic"}`), "panic: conversion exploded [recovered]"},
		{"unknown source version", "example.com/v1", `{"apiVersion":"example.com/v9","kind":"Widget","metadata":{"name":"w"}}`,
			"Widget w: no conversion is registered for example.com/v9 Widget"},
		{"unknown desired version", "example.com/v9", alpha(`{}`), "no conversion is registered for example.com/v9 Widget"},
		{"unknown kind", "example.com/v1", `{"apiVersion":"example.com/v1alpha1","kind":"Gadget","metadata":{"name":"g"}}`,
			"Gadget g: no conversion is registered for example.com/v1alpha1 Gadget"},
		{"an object that does not decode", "example.com/v1", alpha(`{"size":"big"}`), "decoding into *webhook_test.alphaWidget: json: cannot unmarshal string"},
		{"not an object", "example.com/v1", `[1]`, "decoding an object to convert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.convert(t, tt.desired, tt.in)
			if resp.Result.Status != metav1.StatusFailure || !strings.Contains(resp.Result.Message, tt.want) {
				t.Errorf("got result %+v, want Failure containing %q", resp.Result, tt.want)
			}
			if resp.ConvertedObjects != nil {
				t.Errorf("got objects with a failure: %s", resp.ConvertedObjects)
			}
			if !strings.Contains(f.logs.String(), strings.ReplaceAll(tt.want, `"`, `\"`)) {
				t.Errorf("logs lack %q", tt.want)
			}
		})
	}
	if got := metric(f.reg, "controller_runtime_webhook_panics_total", nil); got != 1 {
		t.Errorf("got %v panics, want 1", got)
	}

	for name, body := range map[string]string{
		"not JSON":       `{`,
		"admission":      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1"}}`,
		"no request":     `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`,
		"bad apiVersion": `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"1","desiredAPIVersion":"a/b/c"}}`,
	} {
		if code, out := f.post(t, "/convert", "application/json", []byte(body)); code != http.StatusBadRequest {
			t.Errorf("%s: got %d %s, want 400", name, code, out)
		}
	}
}

func TestConversionRegistration(t *testing.T) {
	f := converter(t)
	other := alphaInfo
	other.Kind = "Gadget"
	cluster := alphaInfo
	cluster.GVR.Resource = "clusterwidgets"
	builtin := widgetInfo
	builtin.Builtin = true
	dup := alphaInfo
	dup.Type = reflect.TypeFor[*betaWidget]()
	tests := map[string]error{
		"the same pair again": webhook.AddConversion(f.Server, alphaInfo, widgetInfo, alphaToV1, v1ToAlpha),
		"the pair reversed":   webhook.AddConversion(f.Server, widgetInfo, alphaInfo, v1ToAlpha, alphaToV1),
		"another kind":        webhook.AddConversion(f.Server, other, widgetInfo, alphaToV1, v1ToAlpha),
		"another resource":    webhook.AddConversion(f.Server, cluster, widgetInfo, alphaToV1, v1ToAlpha),
		"the same version":    webhook.AddConversion(f.Server, widgetInfo, widgetInfo, func(context.Context, *widget, *widget) error { return nil }, func(context.Context, *widget, *widget) error { return nil }),
		"a built-in type":     webhook.AddConversion(f.Server, builtin, alphaInfo, v1ToAlpha, alphaToV1),
		"one direction":       webhook.AddConversion(f.Server, alphaInfo, widgetInfo, alphaToV1, nil),
		"a second Go type":    webhook.AddConversion(f.Server, dup, widgetInfo, betaToV1, v1ToBeta),
	}
	for name, err := range tests {
		if err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
	want := []webhook.Conversion{{Group: "example.com", Resource: "widgets"}}
	if got := f.Conversions(); !reflect.DeepEqual(got, want) {
		t.Errorf("got conversions %v, want %v", got, want)
	}
}

// TestConversionTimeout checks that a request's timeout bounds a chain of
// conversions that runs long.
func TestConversionTimeout(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	done := make(chan struct{})
	slow := func(_ context.Context, src *alphaWidget, dst *widget) error {
		if src.Spec.Color == "slow" {
			defer close(done)
			<-release
		}
		return nil
	}
	if err := webhook.AddConversion(f.Server, alphaInfo, widgetInfo, slow, v1ToAlpha); err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"1","desiredAPIVersion":"example.com/v1",` +
		`"objects":[{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"slow"}}]}}`
	began := time.Now()
	code, out := f.post(t, "/convert?timeout="+strconv.Itoa(100)+"ms", "application/json", []byte(body))
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("a conversion past its 100ms timeout held the request %s", took)
	}
	var review webhook.ConversionReview
	if err := json.Unmarshal(out, &review); err != nil || code != 200 {
		t.Fatalf("got %d %s, want 200 with a review", code, out)
	}
	if r := review.Response.Result; r.Status != metav1.StatusFailure || !strings.Contains(r.Message, "did not finish within the request's timeout") {
		t.Errorf("got %+v, want a failure for the timeout", r)
	}
	close(release)
	<-done
}

// TestConversionLogger checks that a conversion function's context carries
// the server's logger with the webhook's path and the request's uid.
func TestConversionLogger(t *testing.T) {
	f := newFixture(t)
	logged := func(ctx context.Context, src *alphaWidget, dst *widget) error {
		logr.FromContextOrDiscard(ctx).Info("converting", "name", src.Name)
		return alphaToV1(ctx, src, dst)
	}
	if err := webhook.AddConversion(f.Server, alphaInfo, widgetInfo, logged, v1ToAlpha); err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"req-7","desiredAPIVersion":"example.com/v1",` +
		`"objects":[{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1}}]}}`
	if code, out := f.post(t, "/convert", "application/json", []byte(body)); code != http.StatusOK {
		t.Fatalf("got %d %s, want 200", code, out)
	}
	want := `"msg"="converting" "webhook"="/convert" "uid"="req-7" "name"="w"`
	if !strings.Contains(f.logs.String(), want) {
		t.Errorf("logs lack %s:\n%s", want, f.logs)
	}
}
