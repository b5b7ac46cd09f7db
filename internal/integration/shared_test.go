package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/typedctrl/ctrl"
)

// TestSharedObjectChanged: on the API server of ctrltest, a reconcile that
// sets a label on the object it was handed, the cache's own, fails
// WaitIdle naming the controller, the key and metadata.labels; the cache
// holds the server's object again, and the controller that copies first
// writes the label.
func TestSharedObjectChanged(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	buggy, err := ctrl.NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Labels["team"] != "" {
			return ctrl.Result{}, nil
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["team"] = "a" // the cache's object
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "buggy"})}})
	must(t, err)
	_, err = ctrl.NewController(mgr, "copying-labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Labels["team"] != "" {
			return ctrl.Result{}, nil
		}
		cm = cm.DeepCopy() // the fix: change a copy
		cm.Labels["team"] = "a"
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "fixed"})}})
	must(t, err)
	ctx := start(t, mgr)
	for name, app := range map[string]string{"buggy": "buggy", "fixed": "fixed"} {
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}}})
		must(t, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = mgr.WaitIdle(wctx, time.Second)
	for _, want := range []string{`controller "labeler"`, "ConfigMap " + ns + "/buggy", "at metadata.labels"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("WaitIdle: %v, want an error naming %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "copying-labeler") {
		t.Errorf("WaitIdle: %v, want no error of the controller that copies", err)
	}
	cached, ok := buggy.Cache().Get(ctrl.Key{Namespace: ns, Name: "buggy"})
	server, gerr := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "buggy"})
	must(t, gerr)
	if !ok || cached.Labels["team"] != server.Labels["team"] || cached.ResourceVersion != server.ResourceVersion {
		t.Errorf("cache holds labels %v at %s, the server %v at %s", cached.Labels, cached.ResourceVersion, server.Labels, server.ResourceVersion)
	}
	fixed, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "fixed"})
	must(t, err)
	if fixed.Labels["team"] != "a" {
		t.Errorf("the controller that copies left labels %v", fixed.Labels)
	}
}
