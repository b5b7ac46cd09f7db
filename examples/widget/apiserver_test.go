package widget_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/widget"
)

// TestWidgetLifecycle runs the Widget controller against a real API server:
// a new Widget gets its ConfigMap and a Ready condition for its generation,
// and a deleted Widget goes once its finalizer has deleted the ConfigMap.
func TestWidgetLifecycle(t *testing.T) {
	// Stopped when the test ends, after the manager below.
	env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{widget.CRD}})
	// Stopped and checked for leftover goroutines (client-go's idle
	// connections aside) when the test ends, before the control plane.
	mgr := ctrltest.StartManager(t, ctrl.Options{Config: env.Config()}, widget.Setup)
	widgets, err := ctrl.NewClient[*widget.Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// After WaitIdle, the caches hold every write the controller made.
	waitIdle := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	key := ctrl.Key{Namespace: "default", Name: "greeting"}
	w := &widget.Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec:       widget.Spec{Message: "hello", Replicas: 2, Labels: map[string]string{"team": "blue"}},
	}
	if _, err := widgets.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitIdle()
	w, err = widgets.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(w.Status.Conditions, "Ready")
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != w.Generation {
		t.Errorf("got Ready condition %+v, want True for generation %d", ready, w.Generation)
	}
	cmKey := ctrl.Key{Namespace: key.Namespace, Name: w.Status.ConfigMap}
	cm, err := configMaps.Get(ctx, cmKey)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["message"] != "hello" || cm.Labels["team"] != "blue" || !metav1.IsControlledBy(cm, w) {
		t.Errorf("got ConfigMap data %v, labels %v, owners %v; want message hello, team blue, controlled by the Widget",
			cm.Data, cm.Labels, cm.OwnerReferences)
	}

	if err := widgets.Delete(ctx, key, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIdle()
	if _, err := widgets.Get(ctx, key); !apierrors.IsNotFound(err) {
		t.Errorf("got %v getting the deleted Widget, want NotFound", err)
	}
	// No garbage collector runs here: the finalizer deleted the ConfigMap.
	if _, err := configMaps.Get(ctx, cmKey); !apierrors.IsNotFound(err) {
		t.Errorf("got %v getting its ConfigMap, want NotFound", err)
	}
}
