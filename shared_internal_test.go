package ctrl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl/internal/shared"
)

// TestSharedObjectSampled runs the check as outside a test binary: a
// checked reconcile gets a copy, a change to it is logged once and
// counted, the cache's object stays as the server sent it, and the
// controller's next reconciles get copies of their own.
func TestSharedObjectSampled(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{})
	reg := prometheus.NewRegistry()
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	mgr, err := NewManager(Options{FakeClientset: cs, Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ label, shared bool }
	var c *Controller[*corev1.ConfigMap]
	var got []seen
	c, err = NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (Result, error) {
		cached, _ := c.Cache().Get(KeyOf(cm))
		mu.Lock()
		got = append(got, seen{label: cm.Labels["seen"] != "", shared: cached == cm})
		mu.Unlock()
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["seen"] = "yes"
		return Result{}, nil
	}, ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	production(t) // the first 100, then one in 64
	_, idle := startIdle(t, mgr)
	idle()
	key := Key{Namespace: "ns", Name: "a"}
	if cm, _ := c.Cache().Get(key); cm.Labels["seen"] != "" {
		t.Errorf("the cache holds the changed object: labels %v", cm.Labels)
	}
	c.Enqueue(key)
	idle()
	c.Enqueue(key)
	idle()

	mu.Lock()
	defer mu.Unlock()
	want := []seen{{label: false, shared: false}, {label: false, shared: false}, {label: false, shared: false}}
	if len(got) != len(want) {
		t.Fatalf("reconciles saw %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reconcile %d saw %+v, want %+v", i+1, got[i], want[i])
		}
	}
	var found []string
	for _, l := range logs {
		if strings.Contains(l, "get copies from now on") {
			found = append(found, l)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "at metadata.labels") || !strings.Contains(found[0], `"controller"="labeler"`) {
		t.Errorf("logged %q, want one line naming the controller and the path", found)
	}
	if n := counter(t, reg, "ctrl_reconcile_shared_object_changes_total"); n != 1 {
		t.Errorf("ctrl_reconcile_shared_object_changes_total = %v, want 1", n)
	}
}

// startIdle starts mgr until the test ends, and returns its context and a
// function that waits up to a minute for it to be idle.
func startIdle(t *testing.T, mgr *Manager) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ctx, func() {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := mgr.WaitIdle(wctx, time.Second); err != nil {
			t.Fatalf("WaitIdle: %v", err)
		}
	}
}

// production has managers started until the test ends behave as outside
// a test binary.
func production(t *testing.T) {
	saved := shared.InTest
	shared.InTest = func() bool { return false }
	t.Cleanup(func() { shared.InTest = saved })
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestFailedWriteOfSharedObject ports a controller-runtime habit as a
// production binary runs it: an unchecked reconcile changes the cache's
// object itself, then updates it, and the server answers one update with
// a 500 once. The retry must write the change: it reads the server's
// version, not the changed one, whether the reconcile returned the
// update's error or dropped it and asked to be requeued. The cache's index
// files the object under its new label once its event comes, and under
// nothing else.
func TestFailedWriteOfSharedObject(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		t.Run(fmt.Sprintf("dropped=%t", dropped), func(t *testing.T) { testFailedWriteOfSharedObject(t, dropped) })
	}
}

func testFailedWriteOfSharedObject(t *testing.T, dropped bool) {
	production(t)
	const n, marked = 200, 5
	var objs []kruntime.Object
	for i := range n {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%03d", i), Labels: map[string]string{"app": "web"}}})
	}
	cs := fake.NewClientset(objs...)
	var failOnce sync.Once
	var failed atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a clienttesting.Action) (bool, kruntime.Object, error) {
		handled := false
		failOnce.Do(func() { handled = true })
		if handled {
			failed.Store(true)
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	mgr, err := NewManager(Options{FakeClientset: cs, Logger: logr.Discard(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient[*corev1.ConfigMap](mgr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(mgr, "habit", func(ctx context.Context, cm *corev1.ConfigMap) (Result, error) {
		if cm.Annotations["move"] == "" || cm.Labels["app"] == "db" {
			return Result{}, nil
		}
		cm.Labels["app"] = "db" // the habit: the object it was handed
		_, err := client.Update(ctx, cm)
		if err != nil && dropped {
			return Result{RequeueAfter: 10 * time.Millisecond}, nil
		}
		return Result{}, err
	}, ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cache().AddIndex("app", func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["app"]} }); err != nil {
		t.Fatal(err)
	}
	ctx, idle := startIdle(t, mgr)
	idle() // the first 100 reconciles, and then one in 64, are checked
	for i := range marked {
		patch := []byte(`{"metadata":{"annotations":{"move":"yes"}}}`)
		if _, err := client.Patch(ctx, Key{Namespace: "ns", Name: fmt.Sprintf("cm-%03d", 10+i)}, types.MergePatchType, patch); err != nil {
			t.Fatal(err)
		}
	}
	idle()
	if !failed.Load() {
		t.Fatal("no update failed: the test tests nothing")
	}
	for i := range marked {
		name := fmt.Sprintf("cm-%03d", 10+i)
		live, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := live.Labels["app"]; got != "db" {
			t.Errorf("the server holds app=%q for %s, want db: the change was lost", got, name)
		}
	}
	web, err := c.Cache().ByIndex("ns", "app", "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range web {
		if cm.Labels["app"] != "web" {
			t.Errorf("ByIndex(app=web) returns %s, labelled app=%s", cm.Name, cm.Labels["app"])
		}
	}
	if len(web) != n-marked {
		t.Errorf("ByIndex(app=web) returns %d objects, want %d", len(web), n-marked)
	}
}
