package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/internal/watcher"
)

// TestInlineReconcileMayBlock: an idle controller reconciles a watch
// event's key on the goroutine that read it, and a reconcile there may
// wait for anything: for its own cache's next event without a request
// (the watchdog moves the reading on), and after a request to the server
// (which moves the reading on at once).
func TestInlineReconcileMayBlock(t *testing.T) {
	alwaysInline(t)
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	cms := newClient[*corev1.ConfigMap](t, mgr)
	var cache *ctrl.Cache[*corev1.ConfigMap]
	blocked, release := make(chan struct{}), make(chan struct{})
	wrote := make(chan bool, 1)
	c, err := ctrl.NewController(mgr, "inline", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		switch cm.Name {
		case "waits":
			// Blocks, without a request, until the test saw its own
			// cache get the next object.
			close(blocked)
			<-release
		case "writes":
			// A request, then a wait for its own cache to see it.
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "written"}}); err != nil && !apierrors.IsAlreadyExists(err) {
				return ctrl.Result{}, err
			}
			saw := false
			for deadline := time.Now().Add(30 * time.Second); !saw && time.Now().Before(deadline); {
				_, saw = cache.Get(ctrl.Key{Namespace: ns, Name: "written"})
				time.Sleep(time.Millisecond) // the reconcile polls its cache, as a user's might
			}
			select {
			case wrote <- saw:
			default:
			}
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	cache = c.Cache()
	start(t, mgr)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the manager stops, if the test fails first
	waitIdle(t, mgr)

	create := func(name string) {
		t.Helper()
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(t, err)
	}

	runs0, _, bounds0 := watcher.Stats()
	create("waits")
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("waits was never reconciled")
	}
	create("next")
	eventually(t, 30*time.Second, func() error {
		if _, ok := cache.Get(ctrl.Key{Namespace: ns, Name: "next"}); !ok {
			return fmt.Errorf("the cache lacks next while waits' reconcile blocks")
		}
		return nil
	})
	unblock()
	waitIdle(t, mgr)
	runs1, yields1, bounds1 := watcher.Stats()
	if runs1 == runs0 || bounds1 == bounds0 {
		t.Errorf("got %d inline runs and %d hand-overs by the watchdog, want some of each", runs1-runs0, bounds1-bounds0)
	}

	create("writes") // by the test's own client: WaitIdle does not wait for it
	select {
	case saw := <-wrote:
		if !saw {
			t.Error("writes' reconcile never saw the object it wrote in its cache")
		}
	case <-time.After(time.Minute):
		t.Fatal("writes was never reconciled")
	}
	waitIdle(t, mgr)
	if _, yields2, _ := watcher.Stats(); yields2 == yields1 {
		t.Error("no hand-over by yield: writes was not reconciled on the reader, or its request did not yield")
	}
}

// alwaysInline has every reconcile count as short until the test ends, so
// that idle controllers reconcile on the reader however long their
// reconciles take (watcher.Pace), under the race detector too.
func alwaysInline(t *testing.T) {
	saved := watcher.InlineShort
	watcher.InlineShort = time.Hour
	t.Cleanup(func() { watcher.InlineShort = saved })
}

// TestInlineReconcilesKeepTheBound: with reconciles on the watch's reader
// and on workers, no key is reconciled twice at once and no more than
// Workers reconciles run at once, while many objects change; a second
// controller of the type misses none of them.
func TestInlineReconcilesKeepTheBound(t *testing.T) {
	alwaysInline(t)
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			ns := newNamespace(t)
			mgr := newManager(t, ns)
			var mu sync.Mutex
			running := map[string]bool{}
			var now, most, reconciles atomic.Int64
			_, err := ctrl.NewController(mgr, "bound", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				mu.Lock()
				if running[cm.Name] {
					t.Errorf("%s reconciled twice at once", cm.Name)
				}
				running[cm.Name] = true
				mu.Unlock()
				n := now.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				reconciles.Add(1)
				if cm.Name[len(cm.Name)-1] == '0' {
					time.Sleep(2 * time.Millisecond) // a slower one now and then, so they overlap
				}
				now.Add(-1)
				mu.Lock()
				running[cm.Name] = false
				mu.Unlock()
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{Workers: workers})
			must(t, err)
			// A second controller of the type, on the same cache: one of
			// the two reconciles an event's key on the reader, the other
			// gets it through its queue.
			var others atomic.Int64
			_, err = ctrl.NewController(mgr, "bound-too", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				others.Add(1)
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{})
			must(t, err)
			start(t, mgr)
			waitIdle(t, mgr)
			runs0, _, _ := watcher.Stats()
			const n = 60
			createConfigMaps(t, ns, n, 3, func(i int) *corev1.ConfigMap {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}
			})
			// Changes to the same objects, one at a time and from several writers.
			for i := range n {
				_, err := clientset.CoreV1().ConfigMaps(ns).Patch(context.Background(), fmt.Sprintf("cm-%d", i),
					"application/merge-patch+json", []byte(`{"data":{"k":"v"}}`), metav1.PatchOptions{})
				must(t, err)
			}
			eventually(t, time.Minute, func() error {
				if got, other := reconciles.Load(), others.Load(); got < n || other < n {
					return fmt.Errorf("%d and %d reconciles, want at least %d each", got, other, n)
				}
				return nil
			})
			waitIdle(t, mgr)
			if m := most.Load(); m > int64(workers) {
				t.Errorf("%d reconciles ran at once, want at most %d", m, workers)
			}
			if runs, _, _ := watcher.Stats(); runs == runs0 {
				t.Error("no reconcile ran on the watch's reader")
			}
		})
	}
}

// TestInlineReconcileRescopesItsCache: a reconcile on the reader of its
// cache's watch may stop that watch (SetNamespaces drops the namespace,
// and waits for the watch to stop): the reading moves on, sees the stop,
// and the call returns.
func TestInlineReconcileRescopesItsCache(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	must(t, err)
	var cache *ctrl.Cache[*corev1.ConfigMap]
	rescoped := make(chan error, 1)
	c, err := ctrl.NewController(mgr, "rescope", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Namespace == nsA && cm.Name == "move" {
			select {
			case rescoped <- cache.SetNamespaces(nsB):
			default:
			}
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{nsA}}})
	must(t, err)
	cache = c.Cache()
	start(t, mgr)
	waitIdle(t, mgr)

	runs0, _, bounds0 := watcher.Stats()
	_, err = clientset.CoreV1().ConfigMaps(nsA).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "move"}}, metav1.CreateOptions{})
	must(t, err)
	select {
	case err := <-rescoped:
		must(t, err)
	case <-time.After(time.Minute):
		t.Fatal("SetNamespaces, called by a reconcile, never returned")
	}
	_, err = clientset.CoreV1().ConfigMaps(nsB).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "there"}}, metav1.CreateOptions{})
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		if _, ok := cache.Get(ctrl.Key{Namespace: nsB, Name: "there"}); !ok {
			return fmt.Errorf("the cache lacks %s/there", nsB)
		}
		return nil
	})
	waitIdle(t, mgr)
	if runs, _, bounds := watcher.Stats(); runs == runs0 || bounds == bounds0 {
		t.Errorf("got %d inline runs and %d hand-overs by the watchdog, want some of each", runs-runs0, bounds-bounds0)
	}
}

// TestSlowReconcileHoldsNoWatch: a controller whose reconcile spends 30 ms
// on work that sends no request through the manager (a call to a cloud
// API, say) beside a second controller on the same cache: the second sees
// every write within a second, while the first falls behind and its keys
// coalesce in its queue, as with workers alone.
func TestSlowReconcileHoldsNoWatch(t *testing.T) {
	ns := newNamespace(t)
	const n, rounds = 100, 2
	createConfigMaps(t, ns, n, 4, func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%03d", i)}}
	})
	mgr := newManager(t, ns)
	var slow atomic.Int64
	_, err := ctrl.NewController(mgr, "slow", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		slow.Add(1)
		time.Sleep(30 * time.Millisecond) // the cloud API's answer
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	var mu sync.Mutex
	sent, seen := map[string]time.Time{}, map[string]time.Time{}
	_, err = ctrl.NewController(mgr, "fast", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		now := time.Now()
		if seq := cm.Annotations["seq"]; seq != "" {
			mu.Lock()
			if _, ok := seen[cm.Name+"@"+seq]; !ok {
				seen[cm.Name+"@"+seq] = now
			}
			mu.Unlock()
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	slow0 := slow.Load()
	tick := time.NewTicker(10 * time.Millisecond) // 100 writes a second
	defer tick.Stop()
	for r := range rounds {
		for i := range n {
			<-tick.C
			name, seq := fmt.Sprintf("cm-%03d", i), fmt.Sprint(r+1)
			mu.Lock()
			sent[name+"@"+seq] = time.Now()
			mu.Unlock()
			_, err := clientset.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, "application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"seq":"`+seq+`"}}}`), metav1.PatchOptions{})
			must(t, err)
		}
	}
	eventually(t, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < len(sent) {
			return fmt.Errorf("fast saw %d of %d writes", len(seen), len(sent))
		}
		return nil
	})
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	var worstKey string
	for k, at := range sent {
		if lag := seen[k].Sub(at); lag > worst {
			worst, worstKey = lag, k
		}
	}
	if worst > time.Second {
		t.Errorf("fast saw %s %s after it was written, want every write within a second", worstKey, worst.Round(time.Millisecond))
	}
	if got := slow.Load() - slow0; got >= n*rounds {
		t.Errorf("slow reconciled %d times for %d writes, want fewer: its keys queued while it worked did not coalesce", got, n*rounds)
	}
	t.Logf("fast's worst lag %s; slow reconciled %d times for %d writes", worst.Round(time.Millisecond), slow.Load()-slow0, n*rounds)
}
