package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// TestBulk creates a thousand ConfigMaps from outside while a controller
// with several workers stamps each one with an annotation. Every ConfigMap
// must end up stamped on the server, no ConfigMap may be reconciled by two
// workers at once, and none may be reconciled more than a few times.
func TestBulk(t *testing.T) {
	const (
		objects  = 1000
		creators = 4
		workers  = 8
		// Each ConfigMap is reconciled once when created and once more when
		// the stamp's own event arrives; a third time if a reconcile
		// started before the watch delivered the stamp.
		maxReconciles = 3
	)
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		counts   = map[string]int{}
		overlaps []string
	)
	_, err := ctrl.NewController(mgr, "stamper", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		if inFlight[cm.Name] {
			overlaps = append(overlaps, cm.Name)
		}
		inFlight[cm.Name] = true
		counts[cm.Name]++
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(inFlight, cm.Name)
			mu.Unlock()
		}()
		if _, ok := cm.Annotations["reconciled"]; ok {
			return ctrl.Result{}, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconciled":%q}}}`, cm.ResourceVersion)
		_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: workers})
	must(t, err)
	ctx := start(t, mgr)

	began := time.Now()
	createConfigMaps(t, ns, objects, creators, func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
	})
	created := time.Since(began)

	var missing []string
	converged := eventually(t, 2*time.Minute, func() error {
		list, err := clientset.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		missing = missing[:0]
		for _, cm := range list.Items {
			if cm.Annotations["reconciled"] == "" {
				missing = append(missing, cm.Name)
			}
		}
		if len(list.Items) != objects || len(missing) > 0 {
			return fmt.Errorf("got %d ConfigMaps, %d of them not stamped (%v...); want %d, all stamped",
				len(list.Items), len(missing), missing[:min(len(missing), 5)], objects)
		}
		return nil
	})
	waitIdle(t, mgr) // the stamps' own events are reconciled too

	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("got %d reconciles of a ConfigMap that was being reconciled (%v...), want none", len(overlaps), overlaps[:min(len(overlaps), 5)])
	}
	if len(counts) != objects {
		t.Errorf("got %d ConfigMaps reconciled, want %d", len(counts), objects)
	}
	perKey := map[int]int{} // reconciles -> ConfigMaps
	var most int
	for _, n := range counts {
		perKey[n]++
		most = max(most, n)
	}
	if most > maxReconciles {
		var worst []string
		for name, n := range counts {
			if n == most {
				worst = append(worst, name)
			}
		}
		slices.Sort(worst)
		t.Errorf("got up to %d reconciles of one ConfigMap (%v), want at most %d", most, worst, maxReconciles)
	}
	t.Logf("created %d ConfigMaps in %s; all stamped %s later; ConfigMaps by reconciles: %v; max %d",
		objects, created.Round(time.Millisecond), converged.Round(time.Millisecond), perKey, most)
}
