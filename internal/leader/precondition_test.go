package leader

import (
	"testing"

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
		{types.JSONPatchType, `[{"op":"remove","path":"/x"}]`, `[{"op":"remove","path":"/x"}]`, false},
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
