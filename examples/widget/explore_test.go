package widget_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/widget"
)

// TestWidgetPlans runs the Widget controller through crashes after each of
// its writes, stale views and unobserved states, and the faults ctrl
// survives (409 Conflict, 410 Gone), comparing each end state with an
// unperturbed run's: two Widgets created, one's message changed, the other
// deleted (its finalizer deletes its ConfigMap).
func TestWidgetPlans(t *testing.T) {
	env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{widget.CRD}})
	ctrltest.Explore(t, env, ctrltest.Exploration{Setup: widget.Setup, Workload: widgetWorkload, Faults: true})
}

func widgetWorkload(w *ctrltest.Workload) error {
	widgets, err := ctrltest.ClientFor[*widget.Widget](w)
	if err != nil {
		return err
	}
	ctx := w.Context()
	for _, name := range []string{"greeting", "other"} {
		wd := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name},
			Spec: widget.Spec{Message: "hello", Replicas: 2, Labels: map[string]string{"team": "blue"}}}
		if _, err := widgets.Create(ctx, wd); err != nil {
			return err
		}
	}
	if err := w.Settle(); err != nil {
		return err
	}
	if _, err := widgets.Patch(ctx, ctrl.Key{Namespace: w.Namespace, Name: "greeting"}, types.MergePatchType, []byte(`{"spec":{"message":"bye"}}`)); err != nil {
		return err
	}
	return widgets.Delete(ctx, ctrl.Key{Namespace: w.Namespace, Name: "other"})
}
