package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
		w = w.DeepCopyObject().(*Widget)
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
	list, err := widgets.List(ctx, ctrl.ListParams{Namespace: ns})
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

// TestOutageRetriesWaitForServer gives each of 1,000 ConfigMaps a change
// the controller has to write back, kills the API server while every write
// is pending, and brings it back. Nothing changes afterwards, so no new
// event rescues a key: every key whose write failed during the outage must
// be retried because the server came back (released by its return), not
// booked into the future by the retry budget, whose bucket of 10 retries a
// second would spread 1,000 keys over 100 s. The bound is half of that: the
// time the writes themselves take depends on the machine (4 s on a quiet
// one, 18 s beside two busy processes), the budget's does not.
func TestOutageRetriesWaitForServer(t *testing.T) {
	const n = 1000
	ns := newNamespace(t)
	ctx := context.Background()
	cms := clientset.CoreV1().ConfigMaps(ns)
	for i := range n {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)},
			Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
		must(t, err)
	}
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	gate := make(chan struct{})
	var gated atomic.Int32
	_, err := ctrl.NewController(mgr, "writer", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["observed-v"] == cm.Data["v"] {
			return ctrl.Result{}, nil
		}
		if cm.Data["v"] == "2" {
			gated.Add(1)
			<-gate // the first writes of v=2 wait for the API server to die
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"observed-v":%q}}}`, cm.Data["v"])
		_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: 4})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	for i := range n {
		_, err := cms.Patch(ctx, fmt.Sprintf("cm-%04d", i), types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{})
		must(t, err)
	}
	// Every key has its change in the cache, and the workers hold four.
	eventually(t, 30*time.Second, func() error {
		if got := gated.Load(); got < 4 {
			return fmt.Errorf("%d workers holding a write", got)
		}
		return nil
	})
	must(t, env.StopAPIServer())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			must(t, env.StartAPIServer()) // leave a server for the next test
		}
	})
	close(gate) // every write fails now: the server is gone
	waiting := `ctrl_keys_waiting_for_server{controller="writer"}`
	eventually(t, 30*time.Second, func() error {
		if got := metric(t, mgr, waiting); got < n-50 {
			return fmt.Errorf("%s = %v, want nearly all %d keys waiting for the server", waiting, got, n)
		}
		return nil
	})
	must(t, env.StartAPIServer())
	restarted = true
	back := time.Now()
	took := eventually(t, time.Minute, func() error {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		behind := 0
		for _, cm := range list.Items {
			if cm.Annotations["observed-v"] != "2" {
				behind++
			}
		}
		if behind > 0 {
			return fmt.Errorf("%d of %d ConfigMaps not written back", behind, len(list.Items))
		}
		return nil
	})
	released := metric(t, mgr, `ctrl_retries_released_total{controller="writer"}`)
	t.Logf("all %d converged %s after the API server was ready; %v keys released by its return", n,
		time.Since(back).Round(time.Millisecond), released)
	if released < n-50 {
		t.Errorf("%v keys released by the server's return, want nearly all %d", released, n)
	}
	if budget := time.Duration(n/10) * time.Second; took > budget/2 {
		t.Errorf("converged %s after the API server was ready, want within %s, half the retry budget's %s",
			took.Round(time.Millisecond), budget/2, budget)
	}
}

// metric reads a counter or gauge series of mgr's registry.
func metric(t *testing.T, mgr *ctrl.Manager, series string) float64 {
	t.Helper()
	name := series[:strings.IndexByte(series, '{')]
	mfs, err := mgr.Registry().Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if name+"{"+strings.Join(labels, ",")+"}" != series {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}
