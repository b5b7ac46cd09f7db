package ctrl_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// A first controller: it labels every ConfigMap with the number of its keys.
func Example() {
	clientset := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"a": "1", "b": "2"}},
	)
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "configmap-counter", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		want := fmt.Sprint(len(cm.Data))
		if cm.Labels["keys"] == want {
			return ctrl.Result{}, nil
		}
		cm = cm.DeepCopy() // cm is the cache's: change a copy
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["keys"] = want
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cm, err := configMaps.Get(ctx, ctrl.Key{Namespace: "default", Name: "settings"})
	if err != nil {
		panic(err)
	}
	fmt.Println("keys:", cm.Labels["keys"])
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// keys: 2
}

// A parent that owns a child: each Namespace labeled team=... gets a
// ConfigMap "team-info" that it controls, and the ConfigMap is recreated when
// someone deletes it, because Owns maps the deletion back to the Namespace.
func ExampleOwns() {
	clientset := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments", UID: "ns-1", Labels: map[string]string{"team": "blue"}}},
	)
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "team-info", func(ctx context.Context, ns *corev1.Namespace) (ctrl.Result, error) {
		key := ctrl.Key{Namespace: ns.Name, Name: "team-info"}
		if _, err := configMaps.Get(ctx, key); !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err // nil if it exists
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data:       map[string]string{"team": ns.Labels["team"]},
		}
		if err := ctrl.SetControllerReference(ns, cm); err != nil {
			return ctrl.Result{}, err
		}
		fmt.Println("creating", key)
		_, err := configMaps.Create(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := ctrl.Owns[*corev1.ConfigMap](c); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println("deleting payments/team-info")
	if err := configMaps.Delete(ctx, ctrl.Key{Namespace: "payments", Name: "team-info"}, metav1.DeleteOptions{}); err != nil {
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
	// creating payments/team-info
	// deleting payments/team-info
	// creating payments/team-info
}

// Widget is a custom resource: a plain struct with the usual TypeMeta and
// ObjectMeta, and a DeepCopyObject. No generated clientset or scheme.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

type WidgetSpec struct {
	Size int `json:"size"`
}

type WidgetStatus struct {
	Phase string `json:"phase,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func init() {
	if err := ctrl.Register[*Widget](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets"}); err != nil {
		panic(err)
	}
}

// newWidgetFake returns client-go's fake dynamic client, set up to serve
// Widgets, and every other registered type.
func newWidgetFake() *dynamicfake.FakeDynamicClient { return ctrltest.NewFakeDynamic() }

// A custom resource type, registered once, served in tests by client-go's
// fake dynamic client and in production by a real API server.
func ExampleRegister() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "widget-sizer", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		fmt.Printf("widget %s has size %d\n", ctrl.KeyOf(w), w.Spec.Size)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}, Spec: WidgetSpec{Size: 3}}
	if _, err := client.Create(ctx, w); err != nil {
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
	// widget default/w1 has size 3
}

// A state machine over status.phase, one step per reconcile, each step
// written through the status subresource. Each write is an event that
// reconciles the Widget again, until it reaches the last phase.
func ExampleClient_UpdateStatus() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	next := map[string]string{"": "Pending", "Pending": "Building", "Building": "Ready"}
	_, err = ctrl.NewController(mgr, "widget-phases", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		phase, ok := next[w.Status.Phase]
		if !ok {
			return ctrl.Result{}, nil // Ready: nothing to do
		}
		fmt.Printf("%s: %q -> %q\n", w.Name, w.Status.Phase, phase)
		w = w.DeepCopyObject().(*Widget) // w is the cache's: change a copy
		w.Status.Phase = phase
		_, err := client.UpdateStatus(ctx, w)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if _, err := client.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}}); err != nil {
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
	// w1: "" -> "Pending"
	// w1: "Pending" -> "Building"
	// w1: "Building" -> "Ready"
}

// A finalizer: the controller adds it to every Widget, and when a Widget is
// deleted, cleans up before the finalizer is removed and the Widget goes.
// The fakes hold a deletion while finalizers remain, as the API server does,
// so the whole path runs in a unit test.
func ExampleController_OnFinalize() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "widget-cleaner", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		fmt.Printf("reconcile %s, finalizers %v\n", w.Name, w.Finalizers)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	// Reconcile only spec changes; deletions always pass.
	if err := c.FilterUpdates(ctrl.GenerationChanged); err != nil {
		panic(err)
	}
	err = c.OnFinalize("example.com/cleanup", func(ctx context.Context, w *Widget) error {
		fmt.Printf("cleaning up after %s, being deleted: %t\n", w.Name, w.DeletionTimestamp != nil)
		return nil
	})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	key := ctrl.Key{Namespace: "default", Name: "w1"}
	if _, err := client.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	// The Widget carries the finalizer: the delete only marks it, and the
	// controller finalizes it.
	if err := client.Delete(ctx, key, metav1.DeleteOptions{}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	_, err = client.Uncached().Get(ctx, key)
	fmt.Println("gone:", apierrors.IsNotFound(err))
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconcile w1, finalizers [example.com/cleanup]
	// cleaning up after w1, being deleted: true
	// gone: true
}

// An index: find Pods by the node they run on.
func ExampleCache_AddIndex() {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	clientset := fake.NewClientset(pod("a", "node-1"), pod("b", "node-2"), pod("c", "node-1"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	pods, err := ctrl.NewCache[*corev1.Pod](mgr, ctrl.CacheOptions{})
	if err != nil {
		panic(err)
	}
	err = pods.AddIndex("node", func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} })
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := pods.WaitForSync(ctx); err != nil {
		panic(err)
	}
	onNode1, err := pods.ByIndex("", "node", "node-1")
	if err != nil {
		panic(err)
	}
	var names []string
	for _, p := range onNode1 {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	fmt.Println("on node-1:", strings.Join(names, ", "))
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// on node-1: a, c
}
