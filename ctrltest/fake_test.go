package ctrltest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// A unit test of a controller of a custom resource, on client-go's fake
// dynamic client: NewFakeDynamic knows every registered type, so no map of
// list kinds is written by hand.
func ExampleNewFakeDynamic() {
	seed := &Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g1"}, Spec: GadgetSpec{Color: "blue"}}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: ctrltest.NewFakeDynamic(seed)})
	if err != nil {
		panic(err)
	}
	gadgets, err := ctrl.NewClient[*Gadget](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "gadget-painter", func(ctx context.Context, g *Gadget) (ctrl.Result, error) {
		if g.Spec.Color == "red" {
			return ctrl.Result{}, nil
		}
		fmt.Printf("painting %s red (was %s)\n", g.Name, g.Spec.Color)
		g = g.DeepCopyObject().(*Gadget) // g is the cache's: change a copy
		g.Spec.Color = "red"
		_, err := gadgets.Update(ctx, g)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if _, err := gadgets.Create(ctx, &Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g2"}, Spec: GadgetSpec{Color: "green"}}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	list, err := gadgets.List(ctx, ctrl.ListParams{})
	if err != nil {
		panic(err)
	}
	fmt.Println("gadgets:", len(list))
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Unordered output:
	// painting g1 red (was blue)
	// painting g2 red (was green)
	// gadgets: 2
}

// TestNewFakeDynamic serves a built-in resource as unstructured objects
// from NewFakeDynamic, and an object of an unknown kind, and checks what a
// bad seed says.
func TestNewFakeDynamic(t *testing.T) {
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("ns")
	cm.SetName("a")
	thing := &unstructured.Unstructured{}
	thing.SetAPIVersion("things.example.com/v1")
	thing.SetKind("Thing")
	thing.SetName("t")
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: ctrltest.NewFakeDynamic(cm, thing), Logger: ctrltest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	configMaps, err := ctrl.NewCache[*unstructured.Unstructured](mgr, ctrl.CacheOptions{
		Resource: ctrl.APIResource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}})
	if err != nil {
		t.Fatal(err)
	}
	things, err := ctrl.NewCache[*unstructured.Unstructured](mgr, ctrl.CacheOptions{
		Resource: ctrl.APIResource{Group: "things.example.com", Version: "v1", Resource: "things", Kind: "Thing", ClusterScoped: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	for _, c := range []*ctrl.Cache[*unstructured.Unstructured]{configMaps, things} {
		if err := c.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := configMaps.Get(ctrl.Key{Namespace: "ns", Name: "a"}); !ok {
		t.Error("the seeded ConfigMap is not in the cache")
	}
	if _, ok := things.Get(ctrl.Key{Name: "t"}); !ok {
		t.Error("the seeded Thing is not in the cache")
	}

	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "*ctrltest_test.unregistered is not registered") {
			t.Errorf("NewFakeDynamic of an unregistered type: got panic %v, want one naming the type", r)
		}
	}()
	ctrltest.NewFakeDynamic(&unregistered{})
}

type unregistered struct{ Gadget }

// TestLogger checks that the lines of a manager's logger reach the test,
// but not those logged once the test has ended.
func TestLogger(t *testing.T) {
	tb := &recordingTB{TB: t}
	l := ctrltest.Logger(tb)
	l.Info("hello", "k", "v")
	l.Error(errors.New("boom"), "failed")
	l.V(1).Info("detail")
	for _, c := range tb.cleanups {
		c()
	}
	l.Info("too late")
	got := strings.Join(tb.lines, "\n")
	if !strings.Contains(got, `"hello" "k"="v"`) || !strings.Contains(got, `"failed" "error"="boom"`) ||
		strings.Contains(got, "detail") || strings.Contains(got, "too late") || len(tb.lines) != 2 {
		t.Errorf("got lines:\n%s\nwant hello and failed only", got)
	}
}

// recordingTB records what a test logs, and its cleanups.
type recordingTB struct {
	testing.TB
	mu       sync.Mutex
	lines    []string
	cleanups []func()
}

func (r *recordingTB) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprint(args...))
}

func (r *recordingTB) logged() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func (r *recordingTB) Cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }
func (r *recordingTB) Helper()           {}
