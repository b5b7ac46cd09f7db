package ctrltest

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

func TestGenerateCRD(t *testing.T) {
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "example.dev", Version: v, Resource: "things"}
	}
	crd, err := generateCRD("things.example.dev", []binding.Info{
		{Type: reflect.TypeFor[*gizmo](), GVR: gvr("v1beta1"), Kind: "Thing", Namespaced: true, Status: true},
		{Type: reflect.TypeFor[*gizmoV2alpha1](), GVR: gvr("v1"), Kind: "Thing", Namespaced: true},
		{Type: reflect.TypeFor[*registeredWidget](), GVR: gvr("v2alpha1"), Kind: "Thing", Namespaced: true},
	})
	must(t, err)
	spec := func(fields ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(crd.Object, append([]string{"spec"}, fields...)...)
		return v
	}
	for _, tt := range []struct {
		field []string
		want  any
	}{
		{[]string{"group"}, "example.dev"},
		{[]string{"scope"}, "Namespaced"},
		{[]string{"names", "kind"}, "Thing"},
		{[]string{"names", "listKind"}, "ThingList"},
		{[]string{"names", "plural"}, "things"},
		{[]string{"names", "singular"}, "thing"},
	} {
		if got := spec(tt.field...); got != tt.want {
			t.Errorf("got spec.%s %v, want %v", strings.Join(tt.field, "."), got, tt.want)
		}
	}
	var got []string
	for _, v := range spec("versions").([]any) {
		v := v.(map[string]any)
		_, status := v["subresources"]
		preserve, _, _ := unstructured.NestedBool(v, "schema", "openAPIV3Schema", "x-kubernetes-preserve-unknown-fields")
		got = append(got, strings.Join([]string{
			v["name"].(string),
			map[bool]string{true: "storage", false: "-"}[v["storage"].(bool)],
			map[bool]string{true: "status", false: "-"}[status],
			map[bool]string{true: "preserve", false: "-"}[preserve],
		}, " "))
	}
	want := []string{"v1beta1 - status preserve", "v1 storage - preserve", "v2alpha1 - - preserve"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got versions %q, want %q", got, want)
	}

	_, err = generateCRD("things.example.dev", []binding.Info{
		{Type: reflect.TypeFor[*gizmo](), GVR: gvr("v1"), Kind: "Thing", Namespaced: true},
		{Type: reflect.TypeFor[*gizmoV2alpha1](), GVR: gvr("v2"), Kind: "Thing"},
	})
	if err == nil || !strings.Contains(err.Error(), "registered with different kinds or scopes") {
		t.Errorf("got %v, want an error about different scopes", err)
	}
}
