package ctrl

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSharedObjectSampled runs the check as outside a test binary: a
// checked reconcile that changes its shared object is logged once, counted
// and restored, and the next reconcile of the key reads the server's
// version, from a copy of its own.
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
	c.checks.Every = 64 // as outside a test binary: the first 100, then one in 64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	idle := func() {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := mgr.WaitIdle(wctx, time.Second); err != nil {
			t.Fatalf("WaitIdle: %v", err)
		}
	}
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
	want := []seen{{label: false, shared: true}, {label: false, shared: false}, {label: false, shared: false}}
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
		if strings.Contains(l, "restored the cached object") {
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
