package widget_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/widget"
)

// TestWidgetGetsConfigMap runs the Widget controller against client-go's
// fakes: a new Widget gets a ConfigMap with its message and a Ready
// condition, and a deleted one goes once its finalizer has deleted the
// ConfigMap.
func TestWidgetGetsConfigMap(t *testing.T) {
	// Started now, wired by widget.Setup, its log in the test's output;
	// stopped and checked for leftover goroutines when the test ends.
	mgr := ctrltest.StartManager(t, ctrl.Options{
		FakeClientset: fake.NewClientset(),       // serves built-in types: ConfigMaps, Events
		FakeDynamic:   ctrltest.NewFakeDynamic(), // serves every type registered with ctrl.Register
	}, widget.Setup)
	widgets, err := ctrl.NewClient[*widget.Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the whole test's deadline
	defer cancel()

	w := &widget.Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "greeting"},
		Spec:       widget.Spec{Message: "hello", Replicas: 2},
	}
	if _, err := widgets.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	// WaitIdle returns once every write made through the manager's clients
	// has come back through its caches and been reconciled; if reconciles
	// keep failing, or ctx ends first, its error says which and why.
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	cm, err := configMaps.Get(ctx, ctrl.Key{Namespace: "default", Name: "greeting-message"})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["message"] != "hello" || cm.Data["replicas"] != "2" {
		t.Errorf("got ConfigMap data %v, want message hello and replicas 2", cm.Data)
	}
	w, err = widgets.Get(ctx, ctrl.KeyOf(w))
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(w.Status.Conditions, "Ready") {
		t.Errorf("got conditions %+v, want Ready", w.Status.Conditions)
	}

	// The fakes hold a deletion while finalizers remain, as the API server
	// does: the controller's finalizer deletes the ConfigMap, then the
	// Widget goes.
	if err := widgets.Delete(ctx, ctrl.KeyOf(w), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.Get(ctx, ctrl.KeyOf(w)); !apierrors.IsNotFound(err) {
		t.Errorf("got %v getting the deleted Widget, want NotFound", err)
	}
	if _, err := configMaps.Get(ctx, ctrl.Key{Namespace: "default", Name: "greeting-message"}); !apierrors.IsNotFound(err) {
		t.Errorf("got %v getting its ConfigMap, want NotFound", err)
	}
}
