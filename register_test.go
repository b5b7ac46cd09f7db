package ctrl_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/internal/binding"
)

// TestMustRegister checks that MustRegister registers like Register, and
// panics with Register's error.
func TestMustRegister(t *testing.T) {
	same := ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	ctrl.MustRegister[*Widget](same) // as the tests' init registered it: nothing to do
	for name, register := range map[string]func(){
		"built-in": func() { ctrl.MustRegister[*corev1.Pod](ctrl.APIResource{Version: "v1", Resource: "pods"}) },
		"conflicting": func() {
			ctrl.MustRegister[*Widget](ctrl.APIResource{Group: "other.com", Version: "v1", Resource: "widgets"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.HasPrefix(fmt.Sprint(r), "ctrl: register *ctrl_test.") && !strings.HasPrefix(fmt.Sprint(r), "ctrl: register *v1.Pod") {
					t.Errorf("got panic %v, want Register's error", r)
				}
			}()
			register()
		})
	}
}

// Gear is a cluster-scoped custom resource without a status subresource,
// registered with its CRD manifest.
type Gear struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

func (g *Gear) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// Sprocket is registered with its scope declared, and Cog with nothing
// but where it is served.
type (
	Sprocket struct{ Gear }
	Cog      struct{ Gear }
)

func (s *Sprocket) DeepCopyObject() runtime.Object {
	return &Sprocket{*s.Gear.DeepCopyObject().(*Gear)}
}
func (c *Cog) DeepCopyObject() runtime.Object { return &Cog{*c.Gear.DeepCopyObject().(*Gear)} }

const gearCRD = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gears.example.com
spec:
  group: example.com
  names: {kind: Gear, plural: gears, singular: gear, listKind: GearList}
  scope: Cluster
  versions:
  - name: v1alpha1
    served: false
    storage: false
    schema: {openAPIV3Schema: {type: object}}
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

func init() {
	ctrl.MustRegister[*Gear](ctrl.APIResource{CRD: []byte(gearCRD)})
	ctrl.MustRegister[*Sprocket](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "sprockets", ClusterScoped: true})
	ctrl.MustRegister[*Cog](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "cogs"})
}

// offline is a configuration whose every request fails, as a manager
// wired for manifests has.
func offline() *rest.Config {
	return &rest.Config{Host: "https://apiserver.invalid", Transport: binding.Offline{}}
}

// TestWiringOffline wires controllers with no API server to answer: the
// built-in table and a CRD manifest say all wiring needs, and a declared
// scope is enough for the rest; a type registered with neither fails,
// naming what to declare.
func TestWiringOffline(t *testing.T) {
	mgr, err := ctrl.NewManager(ctrl.Options{Config: offline()})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *Gear) (ctrl.Result, error) { return ctrl.Result{}, nil }
	c, err := ctrl.NewController(mgr, "gears", noop, ctrl.ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Owns[*corev1.ConfigMap](c); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.NewCache[*Sprocket](mgr, ctrl.CacheOptions{}); err != nil {
		t.Fatal(err)
	}
	gears, err := ctrl.NewClient[*Gear](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gears.UpdateStatus(t.Context(), &Gear{ObjectMeta: metav1.ObjectMeta{Name: "g"}})
	if want := "no status subresource: its CustomResourceDefinition has no"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("UpdateStatus of a Gear: got %v, want an error containing %q", err, want)
	}
	var got []string
	for _, r := range mgr.RBACRules() {
		got = append(got, fmt.Sprint(r.APIGroups, r.Resources, r.Verbs))
	}
	want := []string{"[] [configmaps] [list watch]", "[example.com] [gears] [list watch]", "[example.com] [sprockets] [list watch]"}
	if !slices.Equal(got, want) {
		t.Errorf("RBACRules: got %q, want %q", got, want)
	}

	_, err = ctrl.NewCache[*Cog](mgr, ctrl.CacheOptions{})
	for _, want := range []string{"*ctrl_test.Cog (cogs.example.com/v1)", "there is no API server to ask", "APIResource.CRD", "APIResource.Namespaced or ClusterScoped"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a cache of a Cog: got %v, want an error containing %q", err, want)
		}
	}
}

// TestRegisterCRD registers types with CRD manifests that contradict what
// is declared beside them, or cannot say which CRD or version is meant.
func TestRegisterCRD(t *testing.T) {
	type bolt struct{ Gear }
	two := gearCRD + strings.ReplaceAll(strings.ReplaceAll(gearCRD, "Gear", "Nut"), "gear", "nut")
	for _, tt := range []struct {
		name string
		res  ctrl.APIResource
		want string
	}{
		{"other group", ctrl.APIResource{Group: "other.com", CRD: []byte(gearCRD), Kind: "Gear"}, `APIResource.Group is "other.com", but CRD gears.example.com is of group "example.com"`},
		{"other plural", ctrl.APIResource{Resource: "cogs", CRD: []byte(gearCRD), Kind: "Gear"}, `APIResource.Resource is "cogs", but CRD gears.example.com names the plural "gears"`},
		{"other scope", ctrl.APIResource{Namespaced: true, CRD: []byte(gearCRD), Kind: "Gear"}, "APIResource.Namespaced or ClusterScoped is set, but CRD gears.example.com is cluster-scoped"},
		{"no status", ctrl.APIResource{Status: true, CRD: []byte(gearCRD), Kind: "Gear"}, "APIResource.Status is set, but CRD gears.example.com has no status subresource in version v1"},
		{"unserved version", ctrl.APIResource{Version: "v1alpha1", CRD: []byte(gearCRD), Kind: "Gear"}, "CRD gears.example.com does not serve version v1alpha1, only v1"},
		{"other kind", ctrl.APIResource{CRD: []byte(gearCRD)}, `its kind is "bolt" (APIResource.Kind, or the Go type's name), but CRD gears.example.com is of kind "Gear": set APIResource.Kind`},
		{"two CRDs", ctrl.APIResource{CRD: []byte(two), Kind: "Bolt"}, `the CRD manifest has no CustomResourceDefinition of kind "Bolt", only of Gear, Nut: set APIResource.Kind`},
		{"no CRD", ctrl.APIResource{CRD: []byte("apiVersion: v1\nkind: ConfigMap\n")}, "the CRD manifest holds a v1 ConfigMap, want apiextensions.k8s.io/v1 CustomResourceDefinition"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ctrl.Register[*bolt](tt.res)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "ctrl: Register *ctrl_test.bolt: ") {
				t.Errorf("got %v, want an error naming the type and containing %q", err, tt.want)
			}
		})
	}
}
