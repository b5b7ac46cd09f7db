package ctrl_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// newOptionalFake returns client-go's fake dynamic client, set up to serve
// Widgets and the CustomResourceDefinitions an optional kind watches.
func newOptionalFake() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList", crds: "CustomResourceDefinitionList"})
}

// installCRD creates the CustomResourceDefinition of a resource, as it is
// once the API server serves the resource: Established. Through a Client
// of the manager, so that WaitIdle waits for what follows from it.
func installCRD(ctx context.Context, mgr *ctrl.Manager, r schema.GroupVersionResource) error {
	client, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: ctrl.APIResource{
		Group: crds.Group, Version: crds.Version, Resource: crds.Resource, Kind: "CustomResourceDefinition", ClusterScoped: true}})
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": r.Resource + "." + r.Group, "uid": "crd-" + r.Resource},
		"spec": map[string]any{
			"group":    r.Group,
			"versions": []any{map[string]any{"name": r.Version, "served": true, "storage": true}},
		},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}}},
	}}
	_, err = client.Create(ctx, crd)
	return err
}

// A controller of an optional kind: the manager starts while the Widget
// CustomResourceDefinition is not installed, and the controller reconciles
// Widgets once it is, without a restart.
func ExampleCacheOptions_optional() {
	dyn := newOptionalFake()
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: dyn})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "widget-sizer", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		fmt.Printf("widget %s has size %d\n", ctrl.KeyOf(w), w.Spec.Size)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Optional: true}})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println("served:", c.Cache().Served())

	if err := installCRD(ctx, mgr, widgets); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println("served:", c.Cache().Served())
	if _, err := client.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}, Spec: WidgetSpec{Size: 3}}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// served: false
	// served: true
	// widget default/w1 has size 3
}

// A controller stopped while the manager runs: it reconciles nothing more,
// and the cache of Secrets that only its Owns used is stopped and emptied.
func ExampleController_Stop() {
	clientset := fake.NewClientset(configMap("default", "a"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var reconciled []string
	c, err := ctrl.NewController(mgr, "configmaps", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		reconciled = append(reconciled, cm.Name)
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := ctrl.Owns[*corev1.Secret](c); err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if err := c.Stop(ctx); err != nil {
		panic(err)
	}
	if _, err := configMaps.Create(ctx, configMap("default", "b")); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("reconciled:", reconciled)
	mu.Unlock()
	_, err = secrets.List(ctx, ctrl.ListParams{Namespace: "default"})
	fmt.Println("Secrets still cached:", err == nil)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconciled: [a]
	// Secrets still cached: false
}

// Unwatch removes a controller's Owns while the manager runs: changes of
// the Secrets it owns no longer reconcile it.
func ExampleUnwatch() {
	owner := configMap("default", "owner")
	owner.UID = "owner-uid"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "child"}}
	if err := ctrl.SetControllerReference(owner, secret); err != nil {
		panic(err)
	}
	clientset := fake.NewClientset(owner, secret)
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "owners", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		fmt.Println("reconcile", cm.Name, "caused by", ctrl.RequestFrom(ctx).Causes)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	// Owns may be added while the manager runs: the owners of the Secrets
	// cached already are reconciled.
	if _, err := ctrl.Owns[*corev1.Secret](c); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if err := ctrl.Unwatch[*corev1.Secret](c); err != nil {
		panic(err)
	}
	if err := secrets.Delete(ctx, ctrl.Key{Namespace: "default", Name: "child"}, metav1.DeleteOptions{}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println("Unwatch again:", ctrl.Unwatch[*corev1.Secret](c) != nil)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconcile owner caused by listed ConfigMap default/owner
	// reconcile owner caused by listed Secret
	// Unwatch again: true
}

// A cache's namespaces changed while the manager runs: the objects of an
// added namespace are reconciled; those of a removed one are forgotten,
// not deleted, so OnDelete does not see them.
func ExampleCache_SetNamespaces() {
	clientset := fake.NewClientset(configMap("team-a", "settings"), configMap("team-b", "settings"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "settings", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		fmt.Println("reconcile", ctrl.KeyOf(cm))
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{"team-a"}}})
	if err != nil {
		panic(err)
	}
	if err := c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		fmt.Println("deleted", ctrl.KeyOf(cm))
		return nil
	}); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if err := c.Cache().SetNamespaces("team-b"); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	var keys []string
	for _, cm := range c.Cache().List("", nil) {
		keys = append(keys, ctrl.KeyOf(cm).String())
	}
	fmt.Println("cached:", keys)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconcile team-a/settings
	// reconcile team-b/settings
	// cached: [team-b/settings]
}

// A reconcile bounded by ReconcileTimeout: its context ends, it returns
// the error, and it is retried with backoff. RequeueJitter spreads the
// requeues of objects reconciled together.
func ExampleControllerOptions_reconcileTimeout() {
	clientset := fake.NewClientset(configMap("default", "slow"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	calls := 0
	_, err = ctrl.NewController(mgr, "slow", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		calls++
		if calls == 1 {
			<-ctx.Done() // a call that hangs until the timeout
			fmt.Println("first call:", ctx.Err())
			return ctrl.Result{}, ctx.Err()
		}
		fmt.Println("second call: done")
		return ctrl.Result{RequeueAfter: time.Hour}, nil
	}, ctrl.ControllerOptions{ReconcileTimeout: 50 * time.Millisecond, RequeueJitter: 0.1})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// first call: context deadline exceeded
	// second call: done
}

// SetCondition records which generation of the spec a condition speaks of.
func ExampleSetCondition() {
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 4}}
	var conditions []metav1.Condition
	changed := ctrl.SetCondition(&conditions, w, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "size 3",
	})
	fmt.Println(changed, conditions[0].Type, conditions[0].Status, conditions[0].ObservedGeneration)
	changed = ctrl.SetCondition(&conditions, w, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "size 3",
	})
	fmt.Println(changed)
	// Output:
	// true Ready True 4
	// false
}
