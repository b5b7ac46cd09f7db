package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// Own Deployments but ignore their status: a Deployment's status changes
// every time its pods do, and the owner only cares when the spec does.
func ExampleOwns_filter() {
	owner := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "w-1"}}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Generation: 1}}
	if err := ctrl.SetControllerReference(owner, deploy); err != nil {
		panic(err)
	}
	widgetFake := newWidgetFake()
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(deploy), FakeDynamic: widgetFake})
	if err != nil {
		panic(err)
	}
	widgets, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "web-app", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		fmt.Printf("reconcile %s: %s\n", ctrl.KeyOf(w), ctrl.RequestFrom(ctx).Causes)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := ctrl.Owns[*appsv1.Deployment](c, ctrl.GenerationChanged); err != nil {
		panic(err)
	}
	deployments, err := ctrl.NewClient[*appsv1.Deployment](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if _, err := widgets.Create(ctx, owner); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	key := ctrl.KeyOf(deploy)
	// A status write, as the Deployment controller makes: filtered out.
	if _, err := deployments.PatchStatus(ctx, key, types.MergePatchType, []byte(`{"status":{"readyReplicas":1}}`)); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	// A spec change. (The fake does not bump generations; a real API
	// server does on every spec change.)
	if _, err := deployments.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"generation":2},"spec":{"paused":true}}`)); err != nil {
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
	// reconcile default/web: created Widget default/web
	// reconcile default/web: owned Deployment default/web
}

// Map ConfigMaps to the Deployments that read them, and reconcile only when
// the one key the Deployments care about changes: the filter compares the
// old and the new ConfigMap.
func ExampleWatches_filter() {
	clientset := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-config"}, Data: map[string]string{"version": "1"}},
	)
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "config-rollout", func(ctx context.Context, d *appsv1.Deployment) (ctrl.Result, error) {
		fmt.Printf("reconcile %s: %s\n", ctrl.KeyOf(d), ctrl.RequestFrom(ctx).Causes)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	if err != nil {
		panic(err)
	}
	versionChanged := func(old, cm *corev1.ConfigMap) bool { return old.Data["version"] != cm.Data["version"] }
	err = ctrl.Watches(c, configMaps, func(cm *corev1.ConfigMap) []ctrl.Key {
		name, ok := strings.CutSuffix(cm.Name, "-config")
		if !ok {
			return nil
		}
		return []ctrl.Key{{Namespace: cm.Namespace, Name: name}}
	}, versionChanged)
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
	key := ctrl.Key{Namespace: "default", Name: "web-config"}
	for _, patch := range []string{`{"data":{"comment":"no rollout"}}`, `{"data":{"version":"2"}}`} {
		if _, err := client.Patch(ctx, key, types.MergePatchType, []byte(patch)); err != nil {
			panic(err)
		}
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			panic(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconcile default/web: listed Deployment default/web
	// reconcile default/web: mapped ConfigMap default/web-config
}

// Reconcile on a signal from outside the cluster: here an HTTP endpoint that
// a CI system or another service calls with the object to refresh. Enqueue
// may be called from any goroutine, and WaitIdle counts what it queues.
func ExampleController_Enqueue() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "refresher", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		fmt.Printf("reconcile %s: %s\n", ctrl.KeyOf(cm), ctrl.RequestFrom(ctx).Causes)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Enqueue(ctrl.Key{Namespace: r.FormValue("namespace"), Name: r.FormValue("name")})
	}))
	defer receiver.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	resp, err := receiver.Client().PostForm(receiver.URL, map[string][]string{"namespace": {"default"}, "name": {"settings"}})
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// reconcile default/settings: listed ConfigMap default/settings
	// reconcile default/settings: enqueued
}

// Why is this reconcile running? The causes say which change queued the key;
// the reconcile's log line carries them too, and the metric
// ctrl_reconcile_causes_total counts them by trigger, in its reason label.
func ExampleRequestFrom() {
	clientset := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "why", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		causes := ctrl.RequestFrom(ctx).Causes
		fmt.Printf("%s: %d cause(s), first %s\n", cm.Name, causes.Total, causes.First[0].Trigger)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
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
	if _, err := client.Patch(ctx, ctrl.Key{Namespace: "default", Name: "a"}, types.MergePatchType, []byte(`{"data":{"x":"1"}}`)); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	if _, err := client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println(ctrl.RequestFrom(context.Background()).Causes.Total, "outside a reconcile")
	// Output:
	// a: 1 cause(s), first listed
	// a: 1 cause(s), first updated
	// b: 1 cause(s), first created
	// 0 outside a reconcile
}

// Make an object what it should be, whether or not it exists: the first call
// creates it, the second patches only the field mutate changed (the field
// someone else set stays), the third finds nothing to change and writes
// nothing.
func ExampleClient_CreateOrPatch() {
	clientset := fake.NewClientset()
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	key := ctrl.Key{Namespace: "default", Name: "settings"}
	level := "info"
	mutate := func(cm *corev1.ConfigMap) error {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data["level"] = level
		return nil
	}
	for _, l := range []string{"info", "debug", "debug"} {
		level = l
		clientset.ClearActions()
		cm, op, err := configMaps.CreateOrPatch(ctx, key, mutate)
		if err != nil {
			panic(err)
		}
		var verbs []string
		for _, a := range clientset.Actions() {
			verbs = append(verbs, a.GetVerb())
		}
		fmt.Printf("%s: data %v, requests %v\n", op, cm.Data, verbs)
		if op == ctrl.Created { // someone else adds a key
			_, err := clientset.CoreV1().ConfigMaps("default").Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"owner":"ops"}}`), metav1.PatchOptions{})
			if err != nil {
				panic(err)
			}
		}
	}
	// Output:
	// created: data map[level:info], requests [get create]
	// patched: data map[level:debug owner:ops], requests [get patch]
	// unchanged: data map[level:debug owner:ops], requests [get]
}

// Change a copy of an object and write only what changed: PatchFrom sends a
// JSON merge patch of the difference, with the resourceVersion the copy was
// read at, so a concurrent change is a conflict instead of a lost update.
func ExampleClient_PatchFrom() {
	clientset := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
		Data:       map[string]string{"level": "info", "owner": "ops"},
	})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	old, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: "default", Name: "settings"})
	if err != nil {
		panic(err)
	}
	old.ResourceVersion = "42" // the fake keeps none; the API server always does
	cm := old.DeepCopy()
	cm.Data["level"] = "debug"
	delete(cm.Data, "owner")
	clientset.ClearActions()
	if _, err := configMaps.PatchFrom(ctx, old, cm); err != nil {
		panic(err)
	}
	fmt.Println(string(clientset.Actions()[0].(clienttesting.PatchAction).GetPatch()))
	// Nothing changed: no request.
	clientset.ClearActions()
	if _, err := configMaps.PatchFrom(ctx, cm, cm.DeepCopy()); err != nil {
		panic(err)
	}
	fmt.Println(len(clientset.Actions()), "requests")
	// Output:
	// {"data":{"level":"debug","owner":null},"metadata":{"resourceVersion":"42"}}
	// 0 requests
}

// One cache over two namespaces of many: one watch each, one view. Reads
// of a namespace it does not hold are errors, not empty answers.
func ExampleCacheOptions_namespaces() {
	cm := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}
	}
	clientset := fake.NewClientset(cm("team-a"), cm("team-b"), cm("team-c"))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	teams, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Namespaces: []string{"team-a", "team-b"}})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := teams.WaitForSync(ctx); err != nil {
		panic(err)
	}
	fmt.Println(teams)
	var keys []string
	for _, cm := range teams.List("", nil) {
		keys = append(keys, ctrl.KeyOf(cm).String())
	}
	slices.Sort(keys)
	fmt.Println(keys)
	inB, err := configMaps.List(ctx, ctrl.ListParams{Namespace: "team-b"})
	fmt.Println(len(inB), err)
	_, err = configMaps.Get(ctx, ctrl.Key{Namespace: "team-c", Name: "settings"})
	fmt.Println(err != nil && !apierrors.IsNotFound(err))
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// *v1.ConfigMap (configmaps) in namespaces "team-a", "team-b"
	// [team-a/settings team-b/settings]
	// 1 <nil>
	// true
}

// A controller over a kind known only at run time, such as one named in a
// configuration file: *unstructured.Unstructured with the resource in the
// options, through the same Controller, Cache and Client as a Go type.
func Example_unstructured() {
	resource := ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Status: true}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	objects, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: resource})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "any-kind", func(ctx context.Context, u *unstructured.Unstructured) (ctrl.Result, error) {
		size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		if observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedSize"); observed == size {
			return ctrl.Result{}, nil
		}
		fmt.Printf("%s %s: observed size %d\n", u.GetKind(), ctrl.KeyOf(u), size)
		patch := fmt.Sprintf(`{"status":{"observedSize":%d}}`, size)
		_, err := objects.PatchStatus(ctx, ctrl.KeyOf(u), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Resource: resource}})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"namespace": "default", "name": "w1"},
		"spec":       map[string]any{"size": int64(3)},
	}}
	if _, err := objects.Create(ctx, w); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	got, err := objects.Get(ctx, ctrl.KeyOf(w))
	if err != nil {
		panic(err)
	}
	fmt.Println(got.Object["status"])
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// Widget default/w1: observed size 3
	// map[observedSize:3]
}

// Note is a custom resource whose CustomResourceDefinition has no status
// subresource: its status is written with the rest of the object.
type Note struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Text              string `json:"text"`
	Status            struct {
		Read bool `json:"read"`
	} `json:"status"`
}

func (n *Note) DeepCopyObject() runtime.Object {
	out := *n
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// A registration names the group, version and resource: the scope and the
// status subresource are in the CustomResourceDefinition, and a manager
// with a Config learns them from the API server's discovery. The fakes have
// no discovery: there a type is namespaced, and has a status subresource
// if it has a status field, unless the registration says otherwise, as a
// cluster-scoped type does.
func ExampleAPIResource() {
	err := errors.Join(
		ctrl.Register[*Note](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "notes"}),
		ctrl.Register[*Board](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "boards", ClusterScoped: true}),
	)
	if err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: ctrltest.NewFakeDynamic()})
	if err != nil {
		panic(err)
	}
	notes, err := ctrl.NewClient[*Note](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	boards, err := ctrl.NewClient[*Board](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, err = notes.Create(ctx, &Note{ObjectMeta: metav1.ObjectMeta{Name: "hello"}})
	fmt.Println(err)
	n, err := notes.Create(ctx, &Note{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"}})
	if err != nil {
		panic(err)
	}
	n.Status.Read = true
	n, err = notes.UpdateStatus(ctx, n)
	fmt.Println("read:", n.Status.Read, err)
	b, err := boards.Create(ctx, &Board{ObjectMeta: metav1.ObjectMeta{Name: "main"}})
	fmt.Println("board:", ctrl.KeyOf(b), err)
	// Output:
	// ctrl: create *ctrl_test.Note hello: the resource is namespaced and the object has no namespace
	// read: true <nil>
	// board: main <nil>
}

// Board is a cluster-scoped custom resource.
type Board struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (b *Board) DeepCopyObject() runtime.Object {
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// Listen on any free port and find out which: Addresses resolves the
// addresses once Start has bound them.
func ExampleManager_Addresses() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), HealthAddress: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	addr := mgr.Addresses().Health
	fmt.Println(strings.HasPrefix(addr, "127.0.0.1:") && addr != "127.0.0.1:0")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// true
	// 200 OK
}

// Act on a cache's failing lists and watches: here the program's role may
// not list Secrets, which the log reports too, but a program may want to
// count it or give up.
func ExampleCache_SetWatchErrorHandler() {
	clientset := fake.NewClientset()
	clientset.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "", errors.New("RBAC: no list"))
	})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		panic(err)
	}
	secrets, err := ctrl.NewCache[*corev1.Secret](mgr, ctrl.CacheOptions{})
	if err != nil {
		panic(err)
	}
	failed := make(chan error, 1)
	secrets.SetWatchErrorHandler(func(err error) {
		select {
		case failed <- err:
		default: // one is enough here; the cache retries every second or so
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	err = <-failed
	fmt.Println(apierrors.IsForbidden(err), err)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// true secrets is forbidden: RBAC: no list
}

// A cached list with a field selector: the cache evaluates it by field path.
func ExampleListParams() {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(pod("a", "node-1"), pod("b", "node-2"))})
	if err != nil {
		panic(err)
	}
	if _, err := ctrl.NewCache[*corev1.Pod](mgr, ctrl.CacheOptions{}); err != nil {
		panic(err)
	}
	pods, err := ctrl.NewClient[*corev1.Pod](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	onNode2, err := pods.List(ctx, ctrl.ListParams{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "node-2")})
	if err != nil {
		panic(err)
	}
	for _, p := range onNode2 {
		fmt.Println(p.Name)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// b
}

// In a manager of a fleet, a key names its cluster too.
func ExampleKey_InCluster() {
	key := ctrl.Key{Namespace: "default", Name: "web"}
	fmt.Println(key, key.InCluster("eu-west"))
	// Output:
	// default/web eu-west:default/web
}

// The RBAC rules of what the manager does itself: here the caches of a
// controller of Widgets with a finalizer and of the ConfigMaps it owns,
// its Events, and leader election. The writes the reconcile makes are the
// program's to add.
func ExampleManager_RBACRules() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: ctrltest.NewFakeDynamic(),
		LeaderElection: ctrl.LeaderElection{Name: "widgets"}})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "widgets", func(context.Context, *Widget) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	if err := c.OnFinalize("example.com/cleanup", func(context.Context, *Widget) error { return nil }); err != nil {
		panic(err)
	}
	if _, err := ctrl.Owns[*corev1.ConfigMap](c); err != nil {
		panic(err)
	}
	if _, err := ctrl.NewRecorder[*Widget](mgr, "widgets"); err != nil {
		panic(err)
	}
	for _, r := range mgr.RBACRules() {
		fmt.Printf("apiGroups: %q, resources: %q, verbs: %q\n", r.APIGroups, r.Resources, r.Verbs)
	}
	// Output:
	// apiGroups: [""], resources: ["configmaps"], verbs: ["list" "watch"]
	// apiGroups: [""], resources: ["events"], verbs: ["create" "patch" "update"]
	// apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create" "get" "update"]
	// apiGroups: ["example.com"], resources: ["widgets"], verbs: ["get" "list" "patch" "watch"]
}

// Write the manager's rules as a ClusterRole manifest, for kubectl apply:
// a command of the program (say, `-print-rbac`) that wires the controllers
// as main does, prints this and exits. Add the writes the reconciles make.
func ExampleManager_RBACRules_clusterRole() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: ctrltest.NewFakeDynamic()})
	if err != nil {
		panic(err)
	}
	if _, err := ctrl.NewController(mgr, "widgets", func(context.Context, *Widget) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{}); err != nil {
		panic(err)
	}
	role := rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: "widget-controller"},
		Rules: append(mgr.RBACRules(), rbacv1.PolicyRule{ // what the reconcile writes
			APIGroups: []string{"example.com"}, Resources: []string{"widgets/status"}, Verbs: []string{"patch"}}),
	}
	manifest, err := yaml.Marshal(role)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(manifest))
	// Output:
	// apiVersion: rbac.authorization.k8s.io/v1
	// kind: ClusterRole
	// metadata:
	//   name: widget-controller
	// rules:
	// - apiGroups:
	//   - example.com
	//   resources:
	//   - widgets
	//   verbs:
	//   - list
	//   - watch
	// - apiGroups:
	//   - example.com
	//   resources:
	//   - widgets/status
	//   verbs:
	//   - patch
}
