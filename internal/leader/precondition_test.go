package leader

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestPrecondition(t *testing.T) {
	tests := []struct {
		pt        types.PatchType
		data, out string
		ok        bool
	}{
		{types.MergePatchType, `{"metadata":{"labels":{"a":"b"}}}`, `{"metadata":{"labels":{"a":"b"},"resourceVersion":"7"}}`, true},
		{types.StrategicMergePatchType, `{"spec":{"replicas":3}}`, `{"metadata":{"resourceVersion":"7"},"spec":{"replicas":3}}`, true},
		{types.MergePatchType, `{"spec":{"n":12345678901234567890}}`, `{"metadata":{"resourceVersion":"7"},"spec":{"n":12345678901234567890}}`, true},
		// The caller's own precondition, or none wanted, stays as it is.
		{types.MergePatchType, `{"metadata":{"resourceVersion":"3"}}`, `{"metadata":{"resourceVersion":"3"}}`, false},
		{types.MergePatchType, `{"metadata":{"resourceVersion":null}}`, `{"metadata":{"resourceVersion":null}}`, false},
		{types.MergePatchType, `{"metadata":null}`, `{"metadata":null}`, false},
		{types.JSONPatchType, `[{"op":"remove","path":"/x"}]`, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/x"}]`, true},
		{types.JSONPatchType, ` [ ] `, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"} ]`, true},
		{types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"3"}]`, `[{"op":"test","path":"/metadata/resourceVersion","value":"3"}]`, false},
		{types.JSONPatchType, `{"a":1}`, `{"a":1}`, false},
		{types.ApplyPatchType, `{"a":1}`, `{"a":1}`, false},
		{types.MergePatchType, `[1]`, `[1]`, false},
		{types.MergePatchType, `null`, `null`, false},
		{types.MergePatchType, `{bad`, `{bad`, false},
	}
	for _, tt := range tests {
		out, ok := Precondition(tt.pt, []byte(tt.data), "7")
		if string(out) != tt.out || ok != tt.ok {
			t.Errorf("Precondition(%s, %s) = %s, %t; want %s, %t", tt.pt, tt.data, out, ok, tt.out, tt.ok)
		}
	}
	if out, ok := Precondition(types.MergePatchType, []byte(`{}`), ""); ok || string(out) != `{}` {
		t.Errorf("no version: got %s, %t", out, ok)
	}
}

func TestRefused(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	fieldConflict := apierrors.NewApplyConflict([]metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict, Field: ".data.a"}}, "conflict")
	jsonTest := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
		"testing value /metadata/resourceVersion failed: test failed", 0, false)
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewConflict(gr, "cm", errors.New("the object has been modified")), true},
		{fmt.Errorf("wrapped: %w", apierrors.NewConflict(gr, "cm", errors.New("x"))), true},
		{jsonTest, true},
		{fieldConflict, false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", nil), true},
		{apierrors.NewNotFound(gr, "cm"), false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := Refused(tt.err); got != tt.want {
			t.Errorf("Refused(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}
