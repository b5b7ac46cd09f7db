package binding

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

type gadget struct{ widget }

type gadgetV2 struct{ widget }

func TestRegistered(t *testing.T) {
	for _, info := range []Info{
		{Type: reflect.TypeFor[*gadgetV2](), GVR: schema.GroupVersionResource{Group: "registered.dev", Version: "v2", Resource: "gadgets"}, Kind: "Gadget", Status: true},
		{Type: reflect.TypeFor[*gadget](), GVR: schema.GroupVersionResource{Group: "registered.dev", Version: "v1", Resource: "gadgets"}, Kind: "Gadget", Status: true},
	} {
		if err := Register(info, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, info := range Registered() {
		if info.GVR.Group == "registered.dev" {
			got = append(got, info.Type.String()+" "+info.GVR.Version)
			if !info.Status || info.Builtin || info.Namespaced {
				t.Errorf("%s: got status %t, built-in %t, namespaced %t; want true, false, false", info, info.Status, info.Builtin, info.Namespaced)
			}
		}
	}
	want := []string{"*binding.gadget v1", "*binding.gadgetV2 v2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
