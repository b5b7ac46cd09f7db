package binding

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type sprocket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            struct{} `json:"status"`
}

func (g *sprocket) DeepCopyObject() runtime.Object { out := *g; return &out }

// TestLearn checks what a binding learns from discovery, and the errors of
// declarations the server contradicts.
func TestLearn(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "gadgets"}
	served := func(namespaced, status bool) Discover {
		return func(gv schema.GroupVersion, _ bool) ([]metav1.APIResource, error) {
			if gv != gvr.GroupVersion() {
				t.Errorf("discovery of %s, want %s", gv, gvr.GroupVersion())
			}
			list := []metav1.APIResource{{Name: "gadgets", Kind: "Gadget", Namespaced: namespaced}}
			if status {
				list = append(list, metav1.APIResource{Name: "gadgets/status", Kind: "Gadget", Namespaced: namespaced})
			}
			return list, nil
		}
	}
	info := func(namespaced, clusterScoped, status bool) Info {
		return Info{Type: reflect.TypeFor[*sprocket](), GVR: gvr, Kind: "Gadget", Namespaced: namespaced,
			ScopeUnknown: !namespaced && !clusterScoped, Status: status, StatusUnknown: !status}
	}
	tests := []struct {
		name           string
		info           Info
		d              Discover
		wantNamespaced bool
		wantStatus     bool
		wantErr        string
	}{
		{"learns namespaced with status", info(false, false, false), served(true, true), true, true, ""},
		{"learns cluster-scoped without status", info(false, false, false), served(false, false), false, false, ""},
		{"declared and agreed", info(true, false, true), served(true, true), true, true, ""},
		{"declared namespaced", info(true, false, false), served(false, true), false, false,
			"*binding.sprocket (gadgets.example.dev/v1): APIResource.Namespaced is set, but the API server's gadgets.example.dev is cluster-scoped"},
		{"declared cluster-scoped", info(false, true, false), served(true, true), false, false,
			"APIResource.ClusterScoped is set, but the API server's gadgets.example.dev is namespaced"},
		{"declared status", info(false, false, true), served(true, false), false, false,
			"APIResource.Status is set, but the API server's gadgets.example.dev has no status subresource"},
		{"other kind", Info{Type: reflect.TypeFor[*sprocket](), GVR: gvr, Kind: "gadget", ScopeUnknown: true, StatusUnknown: true}, served(true, true), false, false,
			`its kind is "gadget" (APIResource.Kind, or the Go type's name), but the API server's gadgets.example.dev is of kind "Gadget"`},
		{"not served", info(false, false, false), func(schema.GroupVersion, bool) ([]metav1.APIResource, error) { return nil, nil }, false, false,
			"the API server does not serve the resource (is its CustomResourceDefinition installed?)"},
		{"group not served", info(false, false, false), func(schema.GroupVersion, bool) ([]metav1.APIResource, error) {
			return nil, apierrors.NewNotFound(schema.GroupResource{}, "")
		}, false, false, "the API server does not serve the resource (is its CustomResourceDefinition installed?)"},
		{"discovery fails", info(false, false, false), func(schema.GroupVersion, bool) ([]metav1.APIResource, error) { return nil, errors.New("refused") }, false, false,
			"learning its scope and subresources from the API server's discovery (is its CustomResourceDefinition installed?): refused"},
		{"fakes: defaults", info(false, false, false), nil, true, true, ""},
		{"fakes: declared", info(false, true, false), nil, false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolved(tt.info, tt.d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Namespaced != tt.wantNamespaced || got.Status != tt.wantStatus {
				t.Errorf("got namespaced %t, status %t; want %t, %t", got.Namespaced, got.Status, tt.wantNamespaced, tt.wantStatus)
			}
			if tt.d != nil && (got.ScopeUnknown || got.StatusUnknown) {
				t.Errorf("learned, yet still unknown: %+v", got)
			}
		})
	}
}
