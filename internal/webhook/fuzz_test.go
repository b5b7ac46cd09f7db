package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/typedctrl/ctrl/internal/metrics"
	"github.com/typedctrl/ctrl/internal/webhook"
)

// fuzzServer serves a validating, a defaulting and a conversion webhook.
func fuzzServer(f *testing.F) *webhook.Server {
	m, err := metrics.NewWebhooks(prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	s := webhook.New(logr.Discard(), m)
	if err := webhook.AddAdmission(s, validator()); err != nil {
		f.Fatal(err)
	}
	err = webhook.AddAdmission(s, &webhook.Admission[*widget]{Info: widgetInfo, Default: func(_ context.Context, w *widget) error {
		if w.Spec.Message == "" {
			w.Spec.Message = "hello"
		}
		w.Spec.Replicas = max(w.Spec.Replicas, 1)
		return nil
	}})
	if err != nil {
		f.Fatal(err)
	}
	if err := webhook.AddConversion(s, alphaInfo, widgetInfo, alphaToV1, v1ToAlpha); err != nil {
		f.Fatal(err)
	}
	if err := webhook.AddConversion(s, betaInfo, widgetInfo, betaToV1, v1ToBeta); err != nil {
		f.Fatal(err)
	}
	return s
}

// fuzzReview posts body to path: the answer is a review answering the
// request's uid (200), or 400 with a message naming the cause; never a
// panic or a 500.
func fuzzReview(t *testing.T, s *webhook.Server, path string, body []byte) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	s.ServeHTTP(rec, req)
	out := rec.Body.String()
	switch rec.Code {
	case http.StatusOK:
		var review struct {
			metav1.TypeMeta
			Response *struct {
				UID types.UID `json:"uid"`
			} `json:"response"`
		}
		var sent struct {
			Request *struct {
				UID types.UID `json:"uid"`
			} `json:"request"`
		}
		if err := utiljson.Unmarshal([]byte(out), &review); err != nil || review.Response == nil {
			t.Fatalf("200 with %q: not a review with a response (%v)", out, err)
		}
		if err := utiljson.Unmarshal(body, &sent); err != nil || sent.Request == nil || sent.Request.UID != review.Response.UID {
			t.Fatalf("200 with %q: does not answer the request's uid", out)
		}
	case http.StatusBadRequest:
		msg := strings.TrimSpace(out)
		if len(msg) < 10 {
			t.Fatalf("400 with %q: want a message naming the cause", out)
		}
	default:
		t.Fatalf("got %d %q, want 200 or 400", rec.Code, out)
	}
}

// FuzzAdmissionReview sends any body to a validating and a defaulting
// webhook.
func FuzzAdmissionReview(f *testing.F) {
	s := fuzzServer(f)
	review := func(op, obj, old string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"example.com","version":"v1","kind":"Widget"},` +
			`"namespace":"ns","name":"w","operation":"` + op + `","object":` + obj + `,"oldObject":` + old + `}}`)
	}
	for _, body := range [][]byte{
		review("CREATE", widgetJSON(3, ""), "null"),
		review("CREATE", `{"spec":{"replicas":50,"Replicas":3}}`, "null"),
		review("UPDATE", widgetJSON(3, "x"), widgetJSON(5, "")),
		review("DELETE", "null", widgetJSON(1, "keep")),
		review("CONNECT", "null", "null"),
		review("CREATE", `{"spec":{"replicas":"many"}}`, "null"),
		review("CREATE", `{"spec":{"replicas":1e400}}`, "null"),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		[]byte(`{]`),
		nil,
	} {
		f.Add(body, false)
		f.Add(body, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, mutating bool) {
		path := "/validate-example-com-v1-widget"
		if mutating {
			path = "/mutate-example-com-v1-widget"
		}
		fuzzReview(t, s, path, body)
	})
}

// FuzzConversionReview sends any body to the conversion webhook.
func FuzzConversionReview(f *testing.F) {
	s := fuzzServer(f)
	review := func(desired string, objects ...string) []byte {
		return []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"c","desiredAPIVersion":"` + desired +
			`","objects":[` + strings.Join(objects, ",") + `]}}`)
	}
	alpha := `{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"name":"w","uid":"1"},"spec":{"size":3,"Size":9,"color":"red"}}`
	for _, body := range [][]byte{
		review("example.com/v1", alpha),
		review("example.com/v2", alpha, widgetJSON(2, "x")),
		review("example.com/v1alpha1", `{"apiVersion":"example.com/v2","kind":"Widget","spec":{"count":-1}}`),
		review("example.com/v1", `{"apiVersion":"example.com/v1alpha1","kind":"Widget","spec":{"color":"panic"}}`),
		review("a/b/c", alpha),
		review("example.com/v1", `{"kind":"Gadget"}`),
		review("example.com/v1", `17`),
		[]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"c"}}`),
		[]byte(`[]`),
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzReview(t, s, "/convert", body)
	})
}
