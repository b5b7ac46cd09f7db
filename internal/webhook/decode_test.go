package webhook_test

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// The API server decodes objects case-sensitively, the last of a repeated
// field winning: a field whose name differs only in case is unknown to it,
// and dropped. A webhook that decoded otherwise would judge, default or
// convert another object than the one stored.
func TestDecodesAsTheAPIServer(t *testing.T) {
	t.Run("validation", func(t *testing.T) {
		f := newFixture(t)
		if err := webhook.AddAdmission(f.Server, validator()); err != nil {
			t.Fatal(err)
		}
		for _, spec := range []string{
			`{"replicas":50,"Replicas":3}`,
			`{"Replicas":3,"replicas":50}`,
			`{"replicas":3,"replicas":50}`,
		} {
			obj := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w"},"spec":` + spec + `}`
			resp := f.admit(t, validatePath, request(admissionv1.Create, obj, ""))
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "must be at most 10") {
				t.Errorf("spec %s: got %+v, want denied: the server stores 50 replicas", spec, resp)
			}
		}
		// The review's own fields are case-sensitive too: a request under
		// another case is no request.
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","Request":{"uid":"1","operation":"CREATE"}}`
		if code, out := f.post(t, validatePath, "application/json", []byte(body)); code != 400 || !strings.Contains(string(out), "no request") {
			t.Errorf("got %d %s, want 400: the AdmissionReview has no request", code, out)
		}
	})
	t.Run("defaulting", func(t *testing.T) {
		f := newFixture(t)
		err := webhook.AddAdmission(f.Server, &webhook.Admission[*widget]{Info: widgetInfo, Default: func(_ context.Context, w *widget) error {
			if w.Spec.Message == "" {
				w.Spec.Message = "hello"
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		raw := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w"},"spec":{"Message":"x"}}`
		resp := f.admit(t, mutatePath, request(admissionv1.Create, raw, ""))
		if !resp.Allowed || resp.Patch == nil {
			t.Fatalf("got %+v, want allowed with a patch: the object has no spec.message", resp)
		}
		sameJSON(t, apply(t, raw, resp.Patch),
			`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w"},"spec":{"Message":"x","message":"hello"}}`)
	})
	t.Run("conversion", func(t *testing.T) {
		f := converter(t)
		alpha := `{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"namespace":"ns","name":"w","uid":"u-1"},"spec":{"size":3,"Size":9}}`
		resp := f.convert(t, "example.com/v1", alpha)
		if resp.Result.Status != metav1.StatusSuccess || len(resp.ConvertedObjects) != 1 {
			t.Fatalf("got %+v, want one object converted", resp)
		}
		sameJSON(t, string(resp.ConvertedObjects[0].Raw),
			`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":"w","uid":"u-1"},"spec":{"replicas":3}}`)
	})
}
