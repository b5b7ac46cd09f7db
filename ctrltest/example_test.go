package ctrltest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// Gadget is a custom resource type with no CRD manifest: GenerateCRDs
// serves it from its registration.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec"`
}

// GadgetSpec is what a Gadget asks for.
type GadgetSpec struct {
	Color string `json:"color"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	if err := ctrl.Register[*Gadget](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "gadgets", Namespaced: true}); err != nil {
		panic(err)
	}
}

// A control plane in a program that is not a test, serving a registered
// custom resource from a generated CRD. A test calls Start instead, which
// stops the control plane when the test ends.
func ExampleNew() {
	env, err := ctrltest.New(ctrltest.Options{GenerateCRDs: true})
	if err != nil {
		panic(err)
	}
	defer env.Stop()

	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	if err != nil {
		panic(err)
	}
	gadgets, err := ctrl.NewClient[*Gadget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	g := &Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g1"}, Spec: GadgetSpec{Color: "blue"}}
	created, err := gadgets.Create(context.Background(), g)
	if err != nil {
		panic(err)
	}
	fmt.Println(created.Name, created.Spec.Color, created.UID != "")
	// Output:
	// g1 blue true
}

// A search of a controller's reactions to crashes, stale views and missed
// events, in a test of its own: the hasher annotates each ConfigMap with a
// hash of its data, and the workload creates a ConfigMap and changes it.
// Each plan runs as a subtest of TestHasherPlans/plans, named by its ID.
func ExampleExplore() {
	setup := func(mgr *ctrl.Manager) error {
		configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
		if err != nil {
			return err
		}
		_, err = ctrl.NewController(mgr, "hasher", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			hash := fmt.Sprintf("%x", sha256.Sum256([]byte(cm.Data["color"])))[:8]
			if cm.Annotations["hash"] == hash {
				return ctrl.Result{}, nil
			}
			patch := []byte(`{"metadata":{"annotations":{"hash":"` + hash + `"}}}`)
			_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, patch)
			return ctrl.Result{}, err
		}, ctrl.ControllerOptions{})
		return err
	}
	workload := func(w *ctrltest.Workload) error {
		configMaps, err := ctrltest.ClientFor[*corev1.ConfigMap](w)
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "settings"}, Data: map[string]string{"color": "blue"}}
		if _, err := configMaps.Create(w.Context(), cm); err != nil {
			return err
		}
		if err := w.Settle(); err != nil { // the controllers are idle: the next step
			return err
		}
		_, err = configMaps.Patch(w.Context(), ctrl.KeyOf(cm), types.MergePatchType, []byte(`{"data":{"color":"green"}}`))
		return err
	}
	TestHasherPlans := func(t *testing.T) {
		env := ctrltest.Start(t, ctrltest.Options{})
		ctrltest.Explore(t, env, ctrltest.Exploration{Setup: setup, Workload: workload, Faults: true})
	}
	_ = TestHasherPlans
}
