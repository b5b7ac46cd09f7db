package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// TestSelectorLeaveIsNotDeletion runs a controller over the ConfigMaps
// labeled role=src, with OnDelete and a finalizer. An object whose label
// changes leaves the cache, but it is not deleted: OnDelete must not see
// it. It carried the controller's finalizer, which nobody else would ever
// remove: the controller finalizes it. A terminating object whose
// finalization fails until after it left the selector is finalized too.
// Only a real deletion reaches OnDelete.
func TestSelectorLeaveIsNotDeletion(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	cms := clientset.CoreV1().ConfigMaps(ns)
	mgr := newManager(t, ns)
	const fin = "example.com/cleanup"
	var (
		mu        sync.Mutex
		deleted   []string
		finalized []string
		holdC     = true // finalizing c fails while set
	)
	c, err := ctrl.NewController(mgr, "selected", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"role": "src"})}})
	must(t, err)
	must(t, c.OnDelete(func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, cm.Name)
		return nil
	}))
	must(t, c.OnFinalize(fin, func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		if cm.Name == "c" && holdC {
			return errors.New("not yet")
		}
		finalized = append(finalized, cm.Name)
		return nil
	}))
	start(t, mgr)
	for _, name := range []string{"a", "b", "c"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "src"}}}
		if name == "c" {
			cm.Finalizers = []string{"example.com/held-by-test"}
		}
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		must(t, err)
	}
	hasFinalizer := func(name string, want bool) func() error {
		return func() error {
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := slices.Contains(cm.Finalizers, fin); got != want {
				return fmt.Errorf("%s: has finalizer %s: %t, want %t", name, fin, got, want)
			}
			return nil
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		eventually(t, 30*time.Second, hasFinalizer(name, true))
	}
	relabel := func(name string) {
		t.Helper()
		_, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"role":"other"}}}`), metav1.PatchOptions{})
		must(t, err)
	}

	// a leaves the selector alive: finalized, its finalizer released.
	relabel("a")
	eventually(t, 30*time.Second, hasFinalizer("a", false))

	// c is being deleted, its finalization fails, and it leaves the
	// selector meanwhile: it is still finalized once finalizing works.
	must(t, cms.Delete(ctx, "c", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() error {
		cm, err := cms.Get(ctx, "c", metav1.GetOptions{})
		if err != nil || cm.DeletionTimestamp == nil {
			return fmt.Errorf("c not terminating: %v", err)
		}
		return nil
	})
	relabel("c")
	mu.Lock()
	holdC = false
	mu.Unlock()
	eventually(t, 30*time.Second, hasFinalizer("c", false))
	_, err = cms.Patch(ctx, "c", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	must(t, err)

	// b is deleted for real: finalized, then gone, then OnDelete.
	must(t, cms.Delete(ctx, "b", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() error {
		if _, err := cms.Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("b: got %v, want it gone", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(deleted) == 0 {
			return errors.New("OnDelete has not seen b")
		}
		return nil
	})
	waitIdle(t, mgr)

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(deleted, []string{"b"}) {
		t.Errorf("OnDelete: got %q, want [b]: objects that leave the selector are not deleted", deleted)
	}
	slices.Sort(finalized)
	if want := []string{"a", "b", "c"}; !slices.Equal(finalized, want) {
		t.Errorf("finalized: got %q, want %q", finalized, want)
	}
}

// TestWaitIdleWrites checks that WaitIdle waits for the writes it can see
// coming and only for those: a create with a generated name (its key is
// known only from the reply), and writes to objects outside a cache's label
// or field selector, which that cache never sees.
func TestWaitIdleWrites(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var mu sync.Mutex
	seen := map[string]int{}
	_, err := ctrl.NewController(mgr, "all", func(_ context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[cm.Name]++
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	named, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "named")})
	must(t, err)
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "web"})})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	created, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "gen-"}})
	must(t, err)
	_, err = configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}})
	must(t, err)
	_, err = configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"}})
	must(t, err)
	_, err = configMaps.Patch(ctx, ctrl.Key{Namespace: ns, Name: "other"}, types.MergePatchType, []byte(`{"data":{"x":"1"}}`))
	must(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	must(t, mgr.WaitIdle(waitCtx, time.Minute))

	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{created.Name, "other", "named"} {
		if seen[name] == 0 {
			t.Errorf("WaitIdle returned before %s was reconciled", name)
		}
	}
	if _, ok := named.Get(ctrl.Key{Namespace: ns, Name: "named"}); !ok {
		t.Error("the field-selected cache does not hold its object")
	}
	if n := len(named.List(ns, nil)); n != 1 {
		t.Errorf("the field-selected cache holds %d objects, want 1", n)
	}
}
