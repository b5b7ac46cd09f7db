package ctrltest_test

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

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
