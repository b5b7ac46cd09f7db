package ctrl_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// A reference to an object, for a status field that points at it: the
// apiVersion and kind come from the type's registration, and objects from
// caches and clients carry them too.
func ExampleReferenceOf() {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", UID: "6f1c"}}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(cm)})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	ref, err := ctrl.ReferenceOf(&Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(ref.APIVersion, ref.Kind, ref.Namespace+"/"+ref.Name)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	got, err := configMaps.Uncached().Get(ctx, ctrl.KeyOf(cm))
	if err != nil {
		panic(err)
	}
	fmt.Println(got.APIVersion, got.Kind)
	ref, err = ctrl.ReferenceOf(got)
	if err != nil {
		panic(err)
	}
	fmt.Println(ref.APIVersion, ref.Kind, ref.Namespace+"/"+ref.Name, ref.UID)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// example.com/v1 Widget default/w1
	// v1 ConfigMap
	// v1 ConfigMap default/settings 6f1c
}
