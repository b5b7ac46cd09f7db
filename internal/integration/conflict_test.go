package integration_test

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// TestUpdateConflict has a second writer change a ConfigMap while the
// controller holds an older copy: the controller's Update fails with a
// conflict, returning it retries with newer state, and in the end the server
// has both writes.
func TestUpdateConflict(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var (
		mu        sync.Mutex
		attempts  int
		conflicts int
		otherErrs []error
	)
	_, err := ctrl.NewController(mgr, "stamper", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Data["stamped"] == "yes" {
			return ctrl.Result{}, nil
		}
		mu.Lock()
		attempts++
		first := attempts == 1
		mu.Unlock()
		if first {
			// The second writer gets in between this reconcile's read and
			// its write. It is the test's own client: the controller learns
			// of it only through its watch.
			_, err := clientset.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType,
				[]byte(`{"data":{"second":"yes"}}`), metav1.PatchOptions{})
			if err != nil {
				return ctrl.Result{}, err
			}
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data["stamped"] = "yes"
		_, err := configMaps.Update(ctx, cm)
		mu.Lock()
		switch {
		case apierrors.IsConflict(err):
			conflicts++
		case err != nil:
			otherErrs = append(otherErrs, err)
		}
		mu.Unlock()
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)

	_, err = configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Data: map[string]string{"first": "yes"}})
	must(t, err)
	waitIdle(t, mgr)

	got, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "c"})
	must(t, err)
	if err := wantData(got, "first", "yes", "second", "yes", "stamped", "yes"); err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if conflicts < 1 {
		t.Errorf("got %d conflicts, want at least 1: the first Update carried a stale resourceVersion", conflicts)
	}
	if attempts != conflicts+1 {
		t.Errorf("got %d attempts for %d conflicts, want one more attempt than conflicts", attempts, conflicts)
	}
	if len(otherErrs) > 0 {
		t.Errorf("got errors %v, want only conflicts", otherErrs)
	}
	t.Logf("%d attempts, %d conflicts", attempts, conflicts)
}
