package builtin_test

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/typedctrl/ctrl/internal/builtin"
	"github.com/typedctrl/ctrl/internal/builtin/discover"
)

// TestTableCoversClientset proves the checked-in table lists every resource
// of kubernetes.Interface exactly as the typed clientset serves it.
func TestTableCoversClientset(t *testing.T) {
	rs, err := discover.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 60 {
		t.Fatalf("discovered %d resources, want at least 60", len(rs))
	}
	if got := builtin.Len(); got != len(rs) {
		t.Errorf("table has %d resources, clientset serves %d: run go generate ./internal/builtin", got, len(rs))
	}
	for _, r := range rs {
		got, ok := builtin.LookupName(r.Type)
		want := builtin.Resource{Group: r.Group, Version: r.Version, Resource: r.Resource, Kind: r.Kind,
			Namespaced: r.Namespaced, Watch: r.Watch, Status: r.Status}
		if !ok || got != want {
			t.Errorf("%s: got %+v (found %t), want %+v", r.Type, got, ok, want)
		}
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		typ  reflect.Type
		want builtin.Resource
		ok   bool
	}{
		{reflect.TypeFor[*corev1.ConfigMap](), builtin.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Watch: true}, true},
		{reflect.TypeFor[*corev1.Node](), builtin.Resource{Version: "v1", Resource: "nodes", Kind: "Node", Watch: true, Status: true}, true},
		{reflect.TypeFor[*appsv1.Deployment](), builtin.Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Watch: true, Status: true}, true},
		{reflect.TypeFor[corev1.ConfigMap](), builtin.Resource{}, false},
		{reflect.TypeFor[*corev1.PodSpec](), builtin.Resource{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			got, ok := builtin.Lookup(tt.typ)
			if ok != tt.ok || got != tt.want {
				t.Errorf("got %+v, %t; want %+v, %t", got, ok, tt.want, tt.ok)
			}
		})
	}
}
