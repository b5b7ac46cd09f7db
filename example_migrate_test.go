package ctrl_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// An index on the cache that Owns watches: the Deployments each ConfigMap
// controls, looked up within the ConfigMap's namespace, whatever
// ConfigMaps of the same name own elsewhere (controller-runtime's
// List(ctx, &list, InNamespace(ns), MatchingFields{"owner": name})).
func ExampleOwns_index() {
	owner := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: types.UID(ns + "-web")}}
	}
	deployment := func(owner *corev1.ConfigMap, name string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: owner.Namespace, Name: name}}
		if err := ctrl.SetControllerReference(owner, d); err != nil {
			panic(err)
		}
		return d
	}
	a, b := owner("team-a"), owner("team-b")
	clientset := fake.NewClientset(a, b, deployment(a, "web-1"), deployment(a, "web-2"), deployment(b, "web-1"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	deployments, err := ctrl.NewClient[*appsv1.Deployment](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	children := map[string]int{}
	c, err := ctrl.NewController(mgr, "web", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		owned, err := deployments.List(ctx, ctrl.ListParams{Namespace: cm.Namespace, Index: "owner", IndexValue: cm.Name})
		mu.Lock()
		children[ctrl.KeyOf(cm).String()] = len(owned)
		mu.Unlock()
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	owned, err := ctrl.Owns[*appsv1.Deployment](c)
	if err != nil {
		panic(err)
	}
	err = owned.AddIndex("owner", func(d *appsv1.Deployment) []string {
		if ref := metav1.GetControllerOfNoCopy(d); ref != nil && ref.Kind == "ConfigMap" {
			return []string{ref.Name}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	for _, key := range slices.Sorted(maps.Keys(children)) {
		fmt.Printf("%s controls %d Deployments\n", key, children[key])
	}
	all, err := owned.ByIndex("", "owner", "web") // every namespace; shared objects
	if err != nil {
		panic(err)
	}
	fmt.Println("owned by a ConfigMap named web:", len(all))
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// team-a/web controls 2 Deployments
	// team-b/web controls 1 Deployments
	// owned by a ConfigMap named web: 3
}
