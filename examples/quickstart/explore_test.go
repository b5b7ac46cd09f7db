package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestHasherPlans runs the hasher through crashes, stale views, unobserved
// states, 409 Conflicts, 429s, 410 Gone and API server restarts on a real
// API server, one plan at a time, comparing each end state with an
// unperturbed run's: two ConfigMaps created, one's data changed twice in a
// row.
func TestHasherPlans(t *testing.T) {
	env := ctrltest.Start(t, ctrltest.Options{})
	ctrltest.Explore(t, env, ctrltest.Exploration{Setup: setup, Faults: true, Serial: true, Workload: func(w *ctrltest.Workload) error {
		configMaps, err := ctrltest.ClientFor[*corev1.ConfigMap](w)
		if err != nil {
			return err
		}
		ctx := w.Context()
		for _, name := range []string{"settings", "colors"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name}, Data: map[string]string{"color": "blue"}}
			if _, err := configMaps.Create(ctx, cm); err != nil {
				return err
			}
		}
		if err := w.Settle(); err != nil {
			return err
		}
		for _, color := range []string{"green", "red"} {
			patch := []byte(`{"data":{"color":"` + color + `"}}`)
			if _, err := configMaps.Patch(ctx, ctrl.Key{Namespace: w.Namespace, Name: "settings"}, types.MergePatchType, patch); err != nil {
				return err
			}
		}
		return nil
	}})
}
