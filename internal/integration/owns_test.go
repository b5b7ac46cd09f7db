package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// TestOwns has each Widget own a ConfigMap holding its size. The server runs
// no garbage collector and no other controller: whatever happens to a
// ConfigMap is undone only because Owns maps it back to its Widget.
func TestOwns(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var reconciles atomic.Int32
	c, err := ctrl.NewController(mgr, "widget-config", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		reconciles.Add(1)
		want := map[string]string{"size": strconv.Itoa(w.Spec.Size)}
		cm, err := configMaps.Get(ctx, ctrl.Key{Namespace: w.Namespace, Name: w.Name + "-config"})
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name + "-config"}, Data: want}
			if err := ctrl.SetControllerReference(w, cm); err != nil {
				return ctrl.Result{}, err
			}
			_, err = configMaps.Create(ctx, cm)
			return ctrl.Result{}, err
		case err != nil:
			return ctrl.Result{}, err
		case fmt.Sprint(cm.Data) == fmt.Sprint(want):
			return ctrl.Result{}, nil
		}
		cm.Data = want
		_, err = configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	_, err = ctrl.Owns[*corev1.ConfigMap](c)
	must(t, err)
	ctx := start(t, mgr)

	w, err := widgets.Create(ctx, newWidget(ns, "w", 1))
	must(t, err)
	waitIdle(t, mgr)
	child := func() (*corev1.ConfigMap, error) {
		return clientset.CoreV1().ConfigMaps(ns).Get(ctx, "w-config", metav1.GetOptions{})
	}
	cm, err := child()
	must(t, err)
	if err := wantData(cm, "size", "1"); err != nil {
		t.Error(err)
	}
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != w.UID || ref.Kind != "Widget" || ref.APIVersion != "example.com/v1" {
		t.Errorf("controller of the ConfigMap: got %+v, want Widget w with uid %s", ref, w.UID)
	}

	// The test's clientset plays someone else: WaitIdle does not know about
	// its writes, so each step polls the server instead.
	steps := []struct {
		name  string
		do    func() error
		check func(cm *corev1.ConfigMap) error
	}{
		{"child deleted", func() error {
			return clientset.CoreV1().ConfigMaps(ns).Delete(ctx, "w-config", metav1.DeleteOptions{})
		}, func(got *corev1.ConfigMap) error {
			if got.UID == cm.UID {
				return fmt.Errorf("got the deleted ConfigMap's uid %s, want a new ConfigMap", got.UID)
			}
			return wantData(got, "size", "1")
		}},
		{"child changed", func() error {
			_, err := clientset.CoreV1().ConfigMaps(ns).Patch(ctx, "w-config", types.MergePatchType,
				[]byte(`{"data":{"size":"99","extra":"x"}}`), metav1.PatchOptions{})
			return err
		}, func(got *corev1.ConfigMap) error { return wantData(got, "size", "1") }},
		{"parent changed", func() error {
			_, err := widgets.Patch(ctx, ctrl.KeyOf(w), types.MergePatchType, []byte(`{"spec":{"size":2}}`))
			return err
		}, func(got *corev1.ConfigMap) error { return wantData(got, "size", "2") }},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before := reconciles.Load()
			must(t, s.do())
			took := eventually(t, 30*time.Second, func() error {
				got, err := child()
				if err != nil {
					return err
				}
				return s.check(got)
			})
			if got := reconciles.Load(); got <= before {
				t.Errorf("got %d reconciles of the Widget, want more than %d", got, before)
			}
			t.Logf("restored in %s", took.Round(time.Millisecond))
		})
	}

	t.Run("unowned ConfigMap", func(t *testing.T) {
		waitIdle(t, mgr)
		before := reconciles.Load()
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger"}})
		must(t, err)
		waitIdle(t, mgr) // the write is tracked: its event has been handled
		if got := reconciles.Load(); got != before {
			t.Errorf("got %d reconciles after creating a ConfigMap no Widget owns, want %d", got, before)
		}
	})
}
