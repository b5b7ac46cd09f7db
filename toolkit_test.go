package ctrl_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// TestWatchesOneCausePerChange checks that an update reconciles each key
// that the old or the new object maps to once, with one cause, however
// many times the mapping names it.
func TestWatchesOneCausePerChange(t *testing.T) {
	cs := fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"), configMap("ns", "src"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	var mu sync.Mutex
	causes := map[string][]ctrl.Causes{}
	c, err := ctrl.NewController(mgr, "mapped", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Name == "src" {
			return ctrl.Result{}, nil // its own changes, not mapped ones
		}
		mu.Lock()
		defer mu.Unlock()
		causes[cm.Name] = append(causes[cm.Name], ctrl.RequestFrom(ctx).Causes)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	src, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	// src maps to the ConfigMaps its data.targets names, twice over.
	must(t, ctrl.Watches(c, src, func(cm *corev1.ConfigMap) []ctrl.Key {
		if cm.Name != "src" {
			return nil
		}
		var keys []ctrl.Key
		for _, name := range strings.Fields(cm.Data["targets"] + " " + cm.Data["targets"]) {
			keys = append(keys, ctrl.Key{Namespace: cm.Namespace, Name: name})
		}
		return keys
	}))
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	for i, step := range []struct {
		targets string
		want    []string // ConfigMaps reconciled, each with one cause
	}{
		{"a", []string{"a"}},
		{"a", []string{"a"}}, // old and new both map to a
		{"b", []string{"a", "b"}},
		{"a b", []string{"a", "b"}},
	} {
		mu.Lock()
		clear(causes)
		mu.Unlock()
		patch := fmt.Sprintf(`{"data":{"targets":%q,"step":"%d"}}`, step.targets, i)
		_, err := client.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "src"}, types.MergePatchType, []byte(patch))
		must(t, err)
		waitIdle(t, mgr)
		mu.Lock()
		var got []string
		for name, cs := range causes {
			got = append(got, name)
			if len(cs) != 1 || cs[0].Total != 1 || cs[0].String() != "mapped ConfigMap ns/src" {
				t.Errorf("targets %q: %s reconciled with causes %v, want once, for one change of src", step.targets, name, cs)
			}
		}
		mu.Unlock()
		slices.Sort(got)
		if !slices.Equal(got, step.want) {
			t.Errorf("targets %q: got %v reconciled, want %v", step.targets, got, step.want)
		}
	}
}

// TestUnstructuredOwner runs a controller of *unstructured.Unstructured
// Widgets that controls a ConfigMap per Widget: SetControllerReference
// takes the owner's kind from the object, and Owns maps a deleted ConfigMap
// back to its Widget, which creates it again.
func TestUnstructuredOwner(t *testing.T) {
	res := ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Status: true}
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: newWidgetFake()})
	objects, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: res})
	must(t, err)
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	var mu sync.Mutex
	var ops []ctrl.Outcome
	c, err := ctrl.NewController(mgr, "unstructured-owner", func(ctx context.Context, u *unstructured.Unstructured) (ctrl.Result, error) {
		_, op, err := configMaps.CreateOrPatch(ctx, ctrl.KeyOf(u), func(cm *corev1.ConfigMap) error {
			return ctrl.SetControllerReference(u, cm)
		})
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Resource: res}})
	must(t, err)
	_, err = ctrl.Owns[*corev1.ConfigMap](c)
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace("ns")
	u.SetName("w")
	u.SetUID("w-1") // the fake sets none
	_, err = objects.Create(ctx, u)
	must(t, err)
	waitIdle(t, mgr)
	key := ctrl.Key{Namespace: "ns", Name: "w"}
	cm, err := configMaps.Get(ctx, key)
	must(t, err)
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.APIVersion != "example.com/v1" || ref.Kind != "Widget" || ref.Name != "w" || ref.UID != "w-1" {
		t.Errorf("controller of the ConfigMap: got %+v, want Widget w", ref)
	}
	must(t, configMaps.Delete(ctx, key, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	if _, err := configMaps.Get(ctx, key); err != nil {
		t.Errorf("after deleting the ConfigMap: %v, want it created again", err)
	}
	mu.Lock()
	// Created, unchanged when the ConfigMap's creation came back through
	// Owns, created again after the deletion, and unchanged once more.
	if got := fmt.Sprint(ops); got != "[created unchanged created unchanged]" {
		t.Errorf("operations: got %s, want [created unchanged created unchanged]", got)
	}
	mu.Unlock()

	noKind := &unstructured.Unstructured{}
	noKind.SetNamespace("ns")
	noKind.SetName("x")
	if err := ctrl.SetControllerReference(noKind, configMap("ns", "y")); err == nil || !strings.Contains(err.Error(), "has no apiVersion and kind") {
		t.Errorf("SetControllerReference with an owner of no kind: got %v, want an error that says so", err)
	}
}
