package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl"
)

// Map changes of one type to keys of another: reconcile every Deployment
// that mounts a ConfigMap when the ConfigMap changes.
func ExampleWatches() {
	deploy := func(name, cm string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}
		return d
	}
	clientset := fake.NewClientset(deploy("web", "web-config"), deploy("api", "api-config"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-config"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	started := false
	c, err := ctrl.NewController(mgr, "rollout", func(ctx context.Context, d *appsv1.Deployment) (ctrl.Result, error) {
		if started {
			fmt.Println("reconcile", d.Name)
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	// An index finds the Deployments that mount a ConfigMap; it is
	// namespaced, as the Deployments are.
	if err := c.Cache().AddIndex("configmap", func(d *appsv1.Deployment) []string {
		var names []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				names = append(names, v.ConfigMap.Name)
			}
		}
		return names
	}); err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	if err != nil {
		panic(err)
	}
	err = ctrl.Watches(c, configMaps, func(cm *corev1.ConfigMap) []ctrl.Key {
		users, _ := c.Cache().ByIndex(cm.Namespace, "configmap", cm.Name)
		var keys []ctrl.Key
		for _, d := range users {
			keys = append(keys, ctrl.KeyOf(d))
		}
		return keys
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
	started = true // print only what the change causes
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := client.Patch(ctx, ctrl.Key{Namespace: "default", Name: "web-config"}, types.MergePatchType, []byte(`{"data":{"x":"1"}}`)); err != nil {
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
	// reconcile web
}

// Observe deletions without a finalizer: the hook receives the last state
// the cache saw.
func ExampleController_OnDelete() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"mode": "fast"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "deletions", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	err = c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		fmt.Printf("%s is gone; it was in mode %s\n", ctrl.KeyOf(cm), cm.Data["mode"])
		return nil
	})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if err := client.Delete(ctx, ctrl.Key{Namespace: "default", Name: "settings"}, metav1.DeleteOptions{}); err != nil {
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
	// default/settings is gone; it was in mode fast
}

// Reconcile spec changes only: writes to status or metadata that do not
// bump metadata.generation are skipped.
func ExampleController_FilterUpdates() {
	clientset := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Generation: 1}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "spec-only", func(ctx context.Context, d *appsv1.Deployment) (ctrl.Result, error) {
		fmt.Println("reconcile generation", d.Generation)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	if err := c.FilterUpdates(ctrl.GenerationChanged); err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*appsv1.Deployment](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	key := ctrl.Key{Namespace: "default", Name: "web"}
	// A status write: skipped. The fakes keep generations as the API
	// server does: a change of the spec adds one, of the status none.
	if _, err := client.PatchStatus(ctx, key, types.MergePatchType, []byte(`{"status":{"replicas":3}}`)); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if _, err := client.Patch(ctx, key, types.MergePatchType, []byte(`{"spec":{"minReadySeconds":5}}`)); err != nil {
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
	// reconcile generation 1
	// reconcile generation 2
}

// Server-side apply: state the fields this program owns.
func ExampleClient_Apply() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset()})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "owned"},
		Data:       map[string]string{"owner": "me"},
	}
	out, err := client.Apply(context.Background(), cm, ctrl.ApplyParams{FieldManager: "example"})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Data["owner"])
	// Output:
	// me
}

// Patch with a JSON merge patch; strategic merge patches work for built-in
// types too.
func ExampleClient_Patch() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	key := ctrl.Key{Namespace: "default", Name: "settings"}
	out, err := client.Patch(context.Background(), key, types.MergePatchType, []byte(`{"data":{"level":"debug"}}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Data["level"])
	// Output:
	// debug
}

// Read without a cache, for a type the program does not want to watch.
func ExampleClient_Uncached() {
	clientset := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "token"}, Data: map[string][]byte{"t": []byte("s3cr3t")}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	s, err := secrets.Uncached().Get(context.Background(), ctrl.Key{Namespace: "default", Name: "token"})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(s.Data["t"]), "bytes")
	_, err = secrets.Uncached().Get(context.Background(), ctrl.Key{Namespace: "default", Name: "missing"})
	fmt.Println(apierrors.IsNotFound(err), ctrl.IgnoreNotFound(err) == nil)
	// Output:
	// 6 bytes
	// true true
}

// A terminal error is not retried: the object waits for its next change.
func ExampleTerminal() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bad"}, Data: map[string]string{"port": "http"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "validator", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		fmt.Println("validating", cm.Name)
		if strings.Trim(cm.Data["port"], "0123456789") != "" {
			return ctrl.Result{}, ctrl.Terminal(errors.New("port is not a number"))
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Hour); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// validating bad
}

// Requeue after a while, for work that depends on time rather than on
// changes.
func ExampleResult() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lease"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	checks := 0
	_, err = ctrl.NewController(mgr, "poller", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		checks++
		if checks < 3 {
			return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	// The requeues are due within a minute, so WaitIdle waits for them.
	if err := mgr.WaitIdle(ctx, time.Second); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println("checks:", checks)
	// Output:
	// checks: 3
}

// Replace the retry policy: here, a fixed per-key backoff from 1 s to a
// minute, with no overall rate limit.
func ExampleDefaultRateLimiter() {
	opts := ctrl.ControllerOptions{
		Workers:     4,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Key](time.Second, time.Minute),
	}
	fmt.Println(opts.RateLimiter.When(ctrl.Key{Name: "a"}), opts.RateLimiter.When(ctrl.Key{Name: "a"}))
	fmt.Println(ctrl.DefaultRateLimiter().When(ctrl.Key{Name: "a"}))
	// Output:
	// 1s 2s
	// 5ms
}

func ExampleKeyOf() {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	fmt.Println(ctrl.KeyOf(pod), ctrl.KeyOf(node))
	// Output:
	// default/web-0 node-1
}

// Emit Events about the objects a controller handles.
func ExampleNewRecorder() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", UID: "1"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	events, err := ctrl.NewRecorder[*corev1.ConfigMap](mgr, "settings-checker")
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "settings-checker", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		events.Eventf(cm, corev1.EventTypeWarning, "Empty", "%s has no data", cm.Name)
		return ctrl.Result{}, nil
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
	// Events are sent in the background; once idle, they are written.
	all, err := ctrl.NewClient[*corev1.Event](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	list, err := all.Uncached().List(ctx, ctrl.ListParams{Namespace: "default"})
	if err != nil {
		panic(err)
	}
	for _, e := range list {
		fmt.Println(e.Type, e.Reason, e.Message)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// Warning Empty settings has no data
}

// The update filters compare an object's old and new states; pass them to
// [ctrl.Controller.FilterUpdates], [ctrl.Owns] or [ctrl.Watches].
func ExampleAnnotationsChanged() {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Generation: 1, Labels: map[string]string{"app": "web"}}}
	obj := old.DeepCopy()
	obj.Annotations = map[string]string{"note": "reviewed"}
	fmt.Println(ctrl.GenerationChanged(old, obj), ctrl.LabelsChanged(old, obj), ctrl.AnnotationsChanged(old, obj))
	// Output: false false true
}
