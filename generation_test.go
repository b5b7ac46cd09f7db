package ctrl_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestFakesKeepGeneration checks that the fakes ctrl wires keep
// metadata.generation as the API server does, so that GenerationChanged
// filters on them as in production: 1 on create; one more for a change of
// the spec, by update or patch; none for a change of the status or of
// metadata. On the typed fake (a Deployment) and the dynamic one (a
// custom resource).
func TestFakesKeepGeneration(t *testing.T) {
	t.Run("custom resource", func(t *testing.T) {
		testGeneration(t, ctrl.Options{FakeDynamic: ctrltest.NewFakeDynamic()},
			&Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: WidgetSpec{Size: 1}},
			func(w *Widget) { w.Spec.Size++ }, func(w *Widget) { w.Status.Phase += "x" },
			`{"spec":{"size":10}}`, `{"status":{"phase":"patched"}}`)
	})
	t.Run("built-in", func(t *testing.T) {
		replicas := int32(1)
		testGeneration(t, ctrl.Options{FakeClientset: fake.NewClientset()},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d"}, Spec: appsv1.DeploymentSpec{Replicas: &replicas}},
			func(d *appsv1.Deployment) { *d.Spec.Replicas++ }, func(d *appsv1.Deployment) { d.Status.Replicas++ },
			`{"spec":{"replicas":10}}`, `{"status":{"replicas":10}}`)
	})
}

// testGeneration creates obj under a controller filtered by
// GenerationChanged, and changes it: its spec by update and by patch (a
// reconcile each, and the generation up by one), its status by update and by
// patch, and its labels (neither).
func testGeneration[T ctrl.Object](t *testing.T, opts ctrl.Options, obj T, spec, status func(T), specPatch, statusPatch string) {
	var reconciles atomic.Int32
	mgr := ctrltest.StartManager(t, opts, func(mgr *ctrl.Manager) error {
		c, err := ctrl.NewController(mgr, "generations", func(context.Context, T) (ctrl.Result, error) {
			reconciles.Add(1)
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		if err != nil {
			return err
		}
		return c.FilterUpdates(ctrl.GenerationChanged)
	})
	client, err := ctrl.NewClient[T](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key := ctrl.KeyOf(obj)
	steps := []struct {
		name       string
		write      func() (T, error)
		generation int64
		reconciles int32
	}{
		{"create", func() (T, error) { return client.Create(ctx, obj) }, 1, 1},
		{"spec update", func() (T, error) {
			o, err := client.Get(ctx, key)
			must(t, err)
			spec(o)
			return client.Update(ctx, o)
		}, 2, 2},
		{"status update", func() (T, error) {
			o, err := client.Get(ctx, key)
			must(t, err)
			status(o)
			return client.UpdateStatus(ctx, o)
		}, 2, 2},
		{"label patch", func() (T, error) {
			return client.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`))
		}, 2, 2},
		{"spec patch", func() (T, error) { return client.Patch(ctx, key, types.MergePatchType, []byte(specPatch)) }, 3, 3},
		{"status patch", func() (T, error) { return client.PatchStatus(ctx, key, types.MergePatchType, []byte(statusPatch)) }, 3, 3},
	}
	for _, s := range steps {
		got, err := s.write()
		must(t, err)
		if got.GetGeneration() != s.generation {
			t.Errorf("%s: got generation %d in the answer, want %d", s.name, got.GetGeneration(), s.generation)
		}
		must(t, mgr.WaitIdle(ctx, time.Minute))
		cached, err := client.Get(ctx, key)
		must(t, err)
		if cached.GetGeneration() != s.generation {
			t.Errorf("%s: got generation %d, want %d", s.name, cached.GetGeneration(), s.generation)
		}
		if n := reconciles.Load(); n != s.reconciles {
			t.Errorf("%s: got %d reconciles in all, want %d", s.name, n, s.reconciles)
		}
	}
}
