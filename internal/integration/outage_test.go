package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// TestAPIServerOutage kills the API server under a running controller that
// copies each Widget's spec.size into its status, brings it back, and at
// once creates, changes and deletes Widgets, while the controller may still
// be waiting to reconnect. The controller must catch up with all of it,
// deletions included.
func TestAPIServerOutage(t *testing.T) {
	const outage = 5 * time.Second
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	var (
		mu          sync.Mutex
		deleted     []string
		watchErrors []error
	)
	c, err := ctrl.NewController(mgr, "size-observer", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		if w.Status.ObservedSize == w.Spec.Size {
			return ctrl.Result{}, nil
		}
		w.Status.ObservedSize = w.Spec.Size
		_, err := widgets.UpdateStatus(ctx, w)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnDelete(func(_ context.Context, w *Widget) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, fmt.Sprintf("%s:%d", w.Name, w.Spec.Size))
		return nil
	}))
	c.Cache().SetWatchErrorHandler(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		watchErrors = append(watchErrors, err)
	})
	ctx := start(t, mgr)

	for i, name := range []string{"a", "b", "c"} {
		_, err := widgets.Create(ctx, newWidget(ns, name, i+1))
		must(t, err)
	}
	waitIdle(t, mgr)
	outsider := outsideWidgets(t)
	if err := observed(ctx, outsider, ns, map[string]int{"a": 1, "b": 2, "c": 3}); err != nil {
		t.Fatal(err)
	}

	must(t, env.StopAPIServer())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			must(t, env.StartAPIServer()) // leave a server for the next test
		}
	})
	// Hold the outage: this sleep is the fault being injected, not a wait
	// for the controller. The controller's watch has broken and it retries.
	time.Sleep(outage)
	began := time.Now()
	must(t, env.StartAPIServer())
	restarted = true
	t.Logf("API server back after %s", time.Since(began).Round(time.Millisecond))

	// Changes made by someone else at once: the controller may not have
	// reconnected yet, and learns of them from its resumed watch or a
	// relist.
	began = time.Now()
	_, err = outsider.Patch(ctx, ctrl.Key{Namespace: ns, Name: "a"}, types.MergePatchType, []byte(`{"spec":{"size":10}}`))
	must(t, err)
	must(t, outsider.Delete(ctx, ctrl.Key{Namespace: ns, Name: "b"}, metav1.DeleteOptions{}))
	_, err = outsider.Create(ctx, newWidget(ns, "d", 4))
	must(t, err)

	eventually(t, time.Minute, func() error {
		if err := observed(ctx, outsider, ns, map[string]int{"a": 10, "c": 3, "d": 4}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(deleted, []string{"b:2"}) {
			return fmt.Errorf("OnDelete: got %v, want [b:2]", deleted)
		}
		return nil
	})
	t.Logf("converged %s after the first change", time.Since(began).Round(time.Millisecond))
	if _, err := outsider.Get(ctx, ctrl.Key{Namespace: ns, Name: "b"}); !apierrors.IsNotFound(err) {
		t.Errorf("Get b: got %v, want not found", err)
	}

	t.Run("SetWatchErrorHandler", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		// The documentation promises that errors interrupting the watch,
		// "the API server unreachable" among them, reach SetWatchErrorHandler.
		if len(watchErrors) == 0 {
			t.Errorf("got no watch errors in a %s outage, want the failed attempts to reconnect", outage)
		}
		t.Logf("watch errors: %v", watchErrors)
	})
}

// observed checks that the Widgets of ns on the server are exactly those
// of want, each with its size observed in its status.
func observed(ctx context.Context, widgets *ctrl.Client[*Widget], ns string, want map[string]int) error {
	list, err := widgets.List(ctx, ctrl.ListOptions{Namespace: ns})
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, w := range list {
		got[w.Name] = fmt.Sprintf("size %d, observed %d", w.Spec.Size, w.Status.ObservedSize)
	}
	wantS := map[string]string{}
	for name, size := range want {
		wantS[name] = fmt.Sprintf("size %d, observed %d", size, size)
	}
	if fmt.Sprint(got) != fmt.Sprint(wantS) {
		return fmt.Errorf("Widgets on the server: got %v, want %v", got, wantS)
	}
	return nil
}
