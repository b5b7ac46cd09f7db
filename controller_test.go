package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
}

func newManager(t *testing.T, opts ctrl.Options) *ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(opts)
	must(t, err)
	return mgr
}

func noop(context.Context, *corev1.ConfigMap) (ctrl.Result, error) { return ctrl.Result{}, nil }

func TestWiringErrors(t *testing.T) {
	type unregistered struct{ Widget }
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	_, err := ctrl.NewController(mgr, "taken", noop, ctrl.ControllerOptions{})
	must(t, err)
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil reconcile", func() error {
			_, err := ctrl.NewController[*corev1.ConfigMap](mgr, "nil", nil, ctrl.ControllerOptions{})
			return err
		}(), `NewController "nil": nil reconcile function`},
		{"empty name", func() error { _, err := ctrl.NewController(mgr, "", noop, ctrl.ControllerOptions{}); return err }(), "empty name"},
		{"duplicate name", func() error { _, err := ctrl.NewController(mgr, "taken", noop, ctrl.ControllerOptions{}); return err }(), `"taken": a controller with this name already exists`},
		{"unregistered type", func() error {
			_, err := ctrl.NewController(mgr, "u", func(context.Context, *unregistered) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
			return err
		}(), "*ctrl_test.unregistered is not a known resource: register it with ctrl.Register"},
		{"not watchable", func() error {
			_, err := ctrl.NewCache[*authenticationv1.TokenReview](mgr, ctrl.CacheOptions{})
			return err
		}(), "*v1.TokenReview (tokenreviews.authentication.k8s.io): the resource cannot be listed or watched"},
		{"custom resource without a dynamic client", func() error { _, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{}); return err }(),
			"*ctrl_test.Widget (widgets.example.com/v1): no client serves custom resources"},
		{"no client", func() error { _, err := ctrl.NewManager(ctrl.Options{}); return err }(), "set Options.Config"},
		{"built-in registration", ctrl.Register[*corev1.Pod](ctrl.APIResource{Version: "v1", Resource: "pods"}), "built-in type"},
		{"conflicting registration", ctrl.Register[*Widget](ctrl.APIResource{Group: "other.com", Version: "v1", Resource: "widgets"}), "already registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", tt.err, tt.want)
			}
		})
	}
}

func TestWiringAfterStart(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	c, err := ctrl.NewController(mgr, "cm", noop, ctrl.ControllerOptions{})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	tests := []struct {
		name string
		err  error
	}{
		{"Start twice", mgr.Start(context.Background())},
		{"NewController", func() error { _, err := ctrl.NewController(mgr, "late", noop, ctrl.ControllerOptions{}); return err }()},
		{"FilterUpdates", c.FilterUpdates(ctrl.GenerationChanged)},
		{"OnDelete", c.OnDelete(func(context.Context, *corev1.ConfigMap) error { return nil })},
		{"Finalizer", c.OnFinalize("example.com/f", func(context.Context, *corev1.ConfigMap) error { return nil })},
		{"SetTransform", c.Cache().SetTransform(func(cm *corev1.ConfigMap) *corev1.ConfigMap { return cm })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, ctrl.ErrStarted) {
				t.Errorf("got %v, want ErrStarted", tt.err)
			}
		})
	}
}

func TestOnFinalizeName(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	c, err := ctrl.NewController(mgr, "cm", noop, ctrl.ControllerOptions{})
	must(t, err)
	fin := func(context.Context, *corev1.ConfigMap) error { return nil }
	for _, name := range []string{"", "cleanup", "Example.com/Bad Name"} {
		if err := c.OnFinalize(name, fin); err == nil {
			t.Errorf("OnFinalize(%q): got no error", name)
		}
	}
	must(t, c.OnFinalize("example.com/cleanup", fin))
	if err := c.OnFinalize("example.com/other", fin); err == nil || !strings.Contains(err.Error(), `already owns finalizer "example.com/cleanup"`) {
		t.Errorf("second OnFinalize: got %v, want already owns", err)
	}
}

// TestResults checks what each outcome of reconcile does, with fake time, so
// that backoffs and requeues pass instantly.
func TestResults(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		// reconcile is called with the call number, from 1.
		reconcile                           func(n int) (ctrl.Result, error)
		wantCalls                           int
		wantSuccess, wantErrors, wantRequeu float64
		wantTerminal, wantPanics            float64
	}{
		{"success", func(int) (ctrl.Result, error) { return ctrl.Result{}, nil }, 1, 1, 0, 0, 0, 0},
		{"error retried until success", func(n int) (ctrl.Result, error) {
			if n < 3 {
				return ctrl.Result{}, boom
			}
			return ctrl.Result{}, nil
		}, 3, 1, 2, 0, 0, 0},
		{"error wins over result", func(n int) (ctrl.Result, error) {
			if n == 1 {
				return ctrl.Result{RequeueAfter: time.Hour}, boom
			}
			return ctrl.Result{}, nil
		}, 2, 1, 1, 0, 0, 0},
		{"terminal error not retried", func(int) (ctrl.Result, error) { return ctrl.Result{}, ctrl.Terminal(boom) }, 1, 0, 1, 0, 1, 0},
		{"panic recovered and retried", func(n int) (ctrl.Result, error) {
			if n == 1 {
				panic("oops")
			}
			return ctrl.Result{}, nil
		}, 2, 1, 1, 0, 0, 1},
		{"requeue after", func(n int) (ctrl.Result, error) {
			if n < 3 {
				return ctrl.Result{RequeueAfter: 10 * time.Minute}, nil
			}
			return ctrl.Result{}, nil
		}, 3, 1, 0, 2, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
				var calls atomic.Int32
				_, err := ctrl.NewController(mgr, "results", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
					return tt.reconcile(int(calls.Add(1)))
				}, ctrl.ControllerOptions{})
				must(t, err)
				start(t, mgr)
				time.Sleep(time.Hour) // fake time: every backoff and requeue has passed
				synctest.Wait()
				if got := int(calls.Load()); got != tt.wantCalls {
					t.Errorf("got %d reconciles, want %d", got, tt.wantCalls)
				}
				reg := mgr.Registry()
				for _, m := range []struct {
					metric string
					want   float64
				}{
					{`controller_runtime_reconcile_total{controller="results",result="success"}`, tt.wantSuccess},
					{`controller_runtime_reconcile_total{controller="results",result="error"}`, tt.wantErrors},
					{`controller_runtime_reconcile_total{controller="results",result="requeue_after"}`, tt.wantRequeu},
					{`controller_runtime_reconcile_errors_total{controller="results"}`, tt.wantErrors},
					{`controller_runtime_terminal_reconcile_errors_total{controller="results"}`, tt.wantTerminal},
					{`controller_runtime_reconcile_panics_total{controller="results"}`, tt.wantPanics},
				} {
					if got := metricValue(t, reg, m.metric); got != m.want {
						t.Errorf("%s: got %v, want %v", m.metric, got, m.want)
					}
				}
			})
		})
	}
}

// TestWaitIdleRequeueWithin checks that a requeue due within requeueWithin
// keeps the manager busy and one due later does not.
func TestWaitIdleRequeueWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		var calls atomic.Int32
		_, err := ctrl.NewController(mgr, "requeue", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			if calls.Add(1) == 1 {
				return ctrl.Result{RequeueAfter: time.Minute}, nil
			}
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx := start(t, mgr)
		must(t, mgr.WaitIdle(ctx, time.Second))
		if got := calls.Load(); got != 1 {
			t.Errorf("idle with a requeue due beyond a second after %d reconciles, want 1", got)
		}
		// WaitIdle polls every millisecond of fake time: a short wait keeps
		// the test fast.
		must(t, mgr.WaitIdle(ctx, 2*time.Minute))
		if got := calls.Load(); got != 2 {
			t.Errorf("idle with a requeue due within two minutes after %d reconciles, want 2", got)
		}
	})
}

// TestWaitIdleFailing checks that WaitIdle names the keys whose reconciles
// fail, with their errors: when the manager is otherwise idle, and when
// ctx ends first. Keys that recover, or fail terminally, are not failing.
func TestWaitIdleFailing(t *testing.T) {
	boom := errors.New("boom")
	setup := func(t *testing.T, reconcile func(cm *corev1.ConfigMap, n int) error) *ctrl.Manager {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"))})
		var mu sync.Mutex
		calls := map[string]int{}
		_, err := ctrl.NewController(mgr, "failing", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			mu.Lock()
			calls[cm.Name]++
			n := calls[cm.Name]
			mu.Unlock()
			return ctrl.Result{}, reconcile(cm, n)
		}, ctrl.ControllerOptions{})
		must(t, err)
		return mgr
	}
	onlyA := func(cm *corev1.ConfigMap, _ int) error {
		if cm.Name == "a" {
			return boom
		}
		return nil
	}
	t.Run("idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mgr := setup(t, onlyA)
			err := mgr.WaitIdle(start(t, mgr), time.Second)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), `controller "failing": ns/a failed`) || strings.Contains(err.Error(), "ns/b") {
				t.Errorf("got %v, want an error naming ns/a (only) and wrapping its error", err)
			}
		})
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mgr := setup(t, onlyA)
			ctx, cancel := context.WithTimeout(start(t, mgr), 10*time.Second)
			defer cancel()
			err := mgr.WaitIdle(ctx, time.Hour) // every retry is due within the hour
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, boom) ||
				!strings.Contains(err.Error(), "still busy: ") || !strings.Contains(err.Error(), `controller "failing": ns/a failed`) {
				t.Errorf("got %v, want the deadline, what is busy, and ns/a's error", err)
			}
		})
	})
	// The manager stops while WaitIdle waits (a test that shares one
	// context between Start and WaitIdle may see either end first): the
	// error still names the failing key.
	t.Run("manager stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mgr := setup(t, onlyA)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			err := mgr.WaitIdle(context.Background(), time.Hour)
			if !strings.Contains(err.Error(), "manager stopped") || !errors.Is(err, boom) ||
				!strings.Contains(err.Error(), `controller "failing": ns/a failed`) {
				t.Errorf("got %v, want manager stopped, and ns/a's error", err)
			}
			must(t, <-done)
			err = mgr.WaitIdle(context.Background(), time.Hour) // once stopped
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), `controller "failing": ns/a failed`) {
				t.Errorf("after Start returned: got %v, want ns/a's error", err)
			}
		})
	})
	t.Run("recovered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mgr := setup(t, func(_ *corev1.ConfigMap, n int) error {
				if n < 3 {
					return boom
				}
				return nil
			})
			must(t, mgr.WaitIdle(start(t, mgr), time.Minute))
		})
	})
	t.Run("terminal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mgr := setup(t, func(*corev1.ConfigMap, int) error { return ctrl.Terminal(boom) })
			must(t, mgr.WaitIdle(start(t, mgr), time.Minute))
		})
	})
	// A retry due while the only worker is busy is overdue, not due in a
	// negative time.
	t.Run("overdue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cs := fake.NewClientset(configMap("ns", "a"))
			mgr := newManager(t, ctrl.Options{FakeClientset: cs})
			failed, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			_, err := ctrl.NewController(mgr, "failing", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				if cm.Name == "a" {
					once.Do(func() { close(failed) })
					return ctrl.Result{}, boom
				}
				<-release // b holds the worker while a's retry comes due
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{Workers: 1})
			must(t, err)
			ctx := start(t, mgr)
			<-failed
			_, err = cs.CoreV1().ConfigMaps("ns").Create(ctx, configMap("ns", "b"), metav1.CreateOptions{})
			must(t, err)
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = mgr.WaitIdle(wait, time.Hour)
			close(release)
			if err == nil || !strings.Contains(err.Error(), `ns/a failed 1 times, retry overdue by 9.99`) || strings.Contains(err.Error(), " in -") {
				t.Errorf("got %v, want ns/a's retry overdue by about 10 s", err)
			}
		})
	})
}

func metricValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	name := series[:strings.IndexByte(series, '{')]
	mfs, err := reg.Gather()
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
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func TestOnDelete(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"))})
	var mu sync.Mutex
	var gone []string
	c, err := ctrl.NewController(mgr, "deletes", noop, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		gone = append(gone, fmt.Sprintf("%s uid=%s data=%v", ctrl.KeyOf(cm), cm.UID, cm.Data))
		return nil
	}))
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	a, err := client.Get(ctx, ctrl.Key{Namespace: "ns", Name: "a"})
	must(t, err)
	a.Data = map[string]string{"last": "state"}
	_, err = client.Update(ctx, a)
	must(t, err)
	waitIdle(t, mgr)
	must(t, client.Delete(ctx, ctrl.Key{Namespace: "ns", Name: "a"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)

	mu.Lock()
	got := slices.Clone(gone)
	mu.Unlock()
	if want := []string{"ns/a uid=ns-a data=map[last:state]"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWatchesAndFilterUpdates(t *testing.T) {
	// Each Secret maps to the ConfigMap named by its "for" label.
	secret := func(name, target string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"for": target}}}
	}
	cs := fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"), secret("s", "a"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	var mu sync.Mutex
	counts := map[string]int{}
	c, err := ctrl.NewController(mgr, "mapped", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		counts[cm.Name]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.FilterUpdates(ctrl.GenerationChanged, ctrl.LabelsChanged))
	secrets, err := ctrl.NewCache[*corev1.Secret](mgr, ctrl.CacheOptions{})
	must(t, err)
	must(t, ctrl.Watches(c, secrets, func(s *corev1.Secret) []ctrl.Key {
		return []ctrl.Key{{Namespace: s.Namespace, Name: s.Labels["for"]}}
	}))
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ss, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	snapshot := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
	if got := snapshot(); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("after start: got %v, want one reconcile each", got)
	}

	steps := []struct {
		name string
		do   func() error
		want map[string]int
	}{
		{"data change is filtered", func() error {
			_, err := cms.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "a"}, types.MergePatchType, []byte(`{"data":{"x":"1"}}`))
			return err
		}, map[string]int{"a": 1, "b": 1}},
		{"generation change passes", func() error {
			// ConfigMaps keep no generation, and the fake, as the API
			// server, refuses one from a write: set it in the tracker,
			// and wait for the cache to see it (WaitIdle tracks only
			// writes through ctrl's clients).
			cm := configMap("ns", "a")
			cm.Generation = 2
			if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "ns"); err != nil {
				return err
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				if got, err := cms.Get(ctx, ctrl.KeyOf(cm)); err == nil && got.Generation == 2 {
					return nil
				}
				if time.Now().After(deadline) {
					return errors.New("the cache did not see generation 2 within a minute")
				}
			}
		}, map[string]int{"a": 2, "b": 1}},
		{"label change passes", func() error {
			_, err := cms.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "b"}, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`))
			return err
		}, map[string]int{"a": 2, "b": 2}},
		{"secret retargeted maps old and new", func() error {
			_, err := ss.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "s"}, types.MergePatchType, []byte(`{"metadata":{"labels":{"for":"b"}}}`))
			return err
		}, map[string]int{"a": 3, "b": 3}},
	}
	for _, st := range steps {
		must(t, st.do())
		waitIdle(t, mgr)
		if got := snapshot(); !maps.Equal(got, st.want) {
			t.Errorf("%s: got %v, want %v", st.name, got, st.want)
		}
	}
}

// TestOneWorkerPerKey hammers a few keys with many workers and fails if a
// key is ever reconciled by two workers at once.
func TestOneWorkerPerKey(t *testing.T) {
	var objs []kruntime.Object
	for i := range 4 {
		objs = append(objs, configMap("ns", fmt.Sprint(i)))
	}
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(objs...)})
	var mu sync.Mutex
	inFlight := map[string]bool{}
	var overlaps, total atomic.Int32
	_, err := ctrl.NewController(mgr, "exclusive", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		if inFlight[cm.Name] {
			overlaps.Add(1)
		}
		inFlight[cm.Name] = true
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		inFlight[cm.Name] = false
		mu.Unlock()
		if total.Add(1) < 200 {
			return ctrl.Result{}, errors.New("again") // requeue while other adds arrive
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 8, RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Key](0, 0)})
	must(t, err)
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	for i := range 50 {
		_, err := client.Patch(ctx, ctrl.Key{Namespace: "ns", Name: fmt.Sprint(i % 4)}, types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, i)))
		must(t, err)
	}
	waitIdle(t, mgr)
	if overlaps.Load() != 0 {
		t.Errorf("got %d overlapping reconciles of one key, want 0", overlaps.Load())
	}
	if total.Load() < 200 {
		t.Errorf("got %d reconciles, want at least 200", total.Load())
	}
}

func TestReconcileLogger(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), Logger: log})
	_, err := ctrl.NewController(mgr, "logging", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		// A context derived from the reconcile's carries its logger and request.
		derived, cancel := context.WithCancel(context.WithValue(ctx, struct{}{}, 1))
		defer cancel()
		logr.FromContextOrDiscard(derived).Info("hello")
		if got := ctrl.RequestFrom(derived).Key; got != ctrl.KeyOf(cm) {
			t.Errorf("RequestFrom(derived context).Key = %v, want %v", got, ctrl.KeyOf(cm))
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		if strings.Contains(l, `"msg"="hello"`) {
			for _, want := range []string{`"controller"="logging"`, `"namespace"="ns"`, `"name"="a"`, `"reconcileID"=`} {
				if !strings.Contains(l, want) {
					t.Errorf("got log line %s, want it to contain %s", l, want)
				}
			}
			return
		}
	}
	t.Errorf("no reconcile log line in %q", lines)
}

func TestShutdown(t *testing.T) {
	t.Run("in-flight reconcile finishes", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		entered, release := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		_, err := ctrl.NewController(mgr, "slow", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			close(entered)
			<-release
			if ctx.Err() != nil {
				return ctrl.Result{}, ctx.Err()
			}
			finished.Store(true)
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		<-entered
		cancel()
		select {
		case err := <-done:
			t.Fatalf("Start returned %v while a reconcile was running", err)
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Errorf("Start: got %v, want nil", err)
		}
		if !finished.Load() {
			t.Error("the in-flight reconcile saw a canceled context")
		}
	})
	t.Run("timeout", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), ShutdownTimeout: 50 * time.Millisecond})
		entered := make(chan struct{})
		_, err := ctrl.NewController(mgr, "stuck", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			close(entered)
			<-ctx.Done() // canceled once the shutdown timeout has passed
			return ctrl.Result{}, ctx.Err()
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		<-entered
		cancel()
		if err := <-done; err == nil || !strings.Contains(err.Error(), `controller "stuck": 1 reconciles still running`) {
			t.Errorf("Start: got %v, want a shutdown timeout naming the controller", err)
		}
	})
}

// TestSharedObject checks that in a test binary, where every reconcile is
// checked, reconcile gets a copy of its own (TestSharedObjectSampled: the
// cache's object itself when unchecked), and that a reconcile that changes
// it fails the test, naming the controller, the key and the path, with
// the cache untouched.
func TestSharedObject(t *testing.T) {
	for _, copies := range []bool{false, true} {
		t.Run(fmt.Sprintf("CopyObject=%t", copies), func(t *testing.T) {
			mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
			var c *ctrl.Controller[*corev1.ConfigMap]
			var shared atomic.Bool
			c, err := ctrl.NewController(mgr, "copies", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				cached, _ := c.Cache().Get(ctrl.KeyOf(cm))
				shared.Store(cached == cm)
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{CopyObject: copies})
			must(t, err)
			start(t, mgr)
			waitIdle(t, mgr)
			if shared.Load() {
				t.Error("reconcile got the cached object itself, want a copy")
			}
		})
	}
	t.Run("changed", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		var reconciles atomic.Int32
		c, err := ctrl.NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			reconciles.Add(1)
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["seen"] = "yes" // the bug: the cache's object
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx, cancel := context.WithTimeout(start(t, mgr), 30*time.Second)
		defer cancel()
		err = mgr.WaitIdle(ctx, time.Second)
		for _, want := range []string{`controller "labeler"`, "ConfigMap ns/a", "at metadata.labels"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("WaitIdle: %v, want an error naming %s", err, want)
			}
		}
		if n := reconciles.Load(); n != 1 {
			t.Errorf("%d reconciles, want 1: the change is not retried", n)
		}
		if cm, _ := c.Cache().Get(ctrl.Key{Namespace: "ns", Name: "a"}); cm.Labels["seen"] != "" {
			t.Errorf("the cache still holds the changed object: labels %v", cm.Labels)
		}
	})
	t.Run("read from a cache", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"))})
		var c *ctrl.Controller[*corev1.ConfigMap]
		c, err := ctrl.NewController(mgr, "sibling-labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			if cm.Name != "a" {
				return ctrl.Result{}, nil
			}
			b, _ := c.Cache().Get(ctrl.Key{Namespace: "ns", Name: "b"})
			b.Data = map[string]string{"touched": "yes"} // the bug: another cached object
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx, cancel := context.WithTimeout(start(t, mgr), 30*time.Second)
		defer cancel()
		err = mgr.WaitIdle(ctx, time.Second)
		for _, want := range []string{"the cached *v1.ConfigMap ns/b was changed at data"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("WaitIdle: %v, want an error naming %s", err, want)
			}
		}
		if cm, _ := c.Cache().Get(ctrl.Key{Namespace: "ns", Name: "b"}); cm.Data["touched"] != "" {
			t.Errorf("the cache still holds the changed object: data %v", cm.Data)
		}
	})
}

// TestListBacklog checks how a controller takes a large initial list: its
// keys wait in a backlog that workqueue_depth counts, a change that arrives
// meanwhile is reconciled before the rest of the list, and every listed key
// is reconciled exactly once.
func TestListBacklog(t *testing.T) {
	const listed = 1000
	var objs []kruntime.Object
	for i := range listed {
		objs = append(objs, configMap("ns", fmt.Sprintf("cm-%04d", i)))
	}
	reg := prometheus.NewRegistry()
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(objs...), Registerer: reg})
	var mu sync.Mutex
	var order []string
	release := make(chan struct{})
	_, err := ctrl.NewController(mgr, "backlog", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		order = append(order, cm.Name)
		first := len(order) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 1})
	must(t, err)
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)

	const depth = `workqueue_depth{controller="backlog",name="backlog"}`
	waitDepth := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for metricValue(t, reg, depth) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", depth, metricValue(t, reg, depth), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitDepth(listed - 1) // one key is being reconciled, the rest wait
	_, err = client.Create(ctx, configMap("ns", "live"))
	must(t, err)
	waitDepth(listed)
	close(release)
	waitIdle(t, mgr)

	mu.Lock()
	defer mu.Unlock()
	pos := slices.Index(order, "live")
	if pos < 0 || pos > 130 {
		t.Errorf("the change that arrived during the list was reconciled at position %d of %d, want within the first 130", pos, len(order))
	}
	counts := map[string]int{}
	for _, name := range order {
		counts[name]++
	}
	if len(counts) != listed+1 || len(order) != listed+1 {
		t.Errorf("%d reconciles of %d keys, want each of %d keys once", len(order), len(counts), listed+1)
	}
	if got := metricValue(t, reg, depth); got != 0 {
		t.Errorf("%s = %v once idle, want 0", depth, got)
	}
}

// TestWaitIdleAfterFinalizeOnFakes deletes objects that carry the
// controller's finalizer, one at a time, through a ctrl client on the fake
// dynamic client: once WaitIdle returns, each is gone from the cache too.
// The fake sends two events for the write that removes the last finalizer
// (the update, then the removal); WaitIdle had returned after the first,
// while the cache still held the object (one deletion in 20 on a busy
// machine).
func TestWaitIdleAfterFinalizeOnFakes(t *testing.T) {
	const n = 30
	var objs []kruntime.Object
	for i := range n {
		objs = append(objs, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(i)}})
	}
	mgr := newManager(t, ctrl.Options{FakeDynamic: ctrltest.NewFakeDynamic(objs...)})
	c, err := ctrl.NewController(mgr, "finalizing", func(context.Context, *Widget) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnFinalize("example.com/cleanup", func(context.Context, *Widget) error { return nil }))
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	for i := range n {
		key := ctrl.Key{Namespace: "ns", Name: fmt.Sprint(i)}
		must(t, client.Delete(ctx, key, metav1.DeleteOptions{}))
		waitIdle(t, mgr)
		if w, err := client.Get(ctx, key); !apierrors.IsNotFound(err) {
			t.Fatalf("%s: WaitIdle returned with the finalized object still cached (finalizers %v): got %v, want NotFound", key, w.GetFinalizers(), err)
		}
	}
}

// TestOnFinalizeOnFakes deletes objects that carry the controller's
// finalizer, through a ctrl client and through the fake clientset itself:
// the fake holds each until finalize has run and the finalizer is removed,
// as the API server does.
func TestOnFinalizeOnFakes(t *testing.T) {
	cs := fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	var mu sync.Mutex
	var finalized []string
	c, err := ctrl.NewController(mgr, "finalizing", noop, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnFinalize("example.com/cleanup", func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		finalized = append(finalized, fmt.Sprintf("%s deleting=%t", ctrl.KeyOf(cm), cm.DeletionTimestamp != nil))
		return nil
	}))
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	for _, name := range []string{"a", "b"} {
		cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if !slices.Equal(cm.Finalizers, []string{"example.com/cleanup"}) {
			t.Fatalf("%s: got finalizers %v, want the controller's", name, cm.Finalizers)
		}
	}

	must(t, client.Delete(ctx, ctrl.Key{Namespace: "ns", Name: "a"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	if _, err := client.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "a"}); !apierrors.IsNotFound(err) {
		t.Errorf("after the delete through ctrl: got %v, want NotFound", err)
	}

	// WaitIdle does not track writes made with other clients: poll.
	must(t, cs.CoreV1().ConfigMaps("ns").Delete(ctx, "b", metav1.DeleteOptions{}))
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "b", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still there a minute after its delete: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling the fake, which WaitIdle does not track
	}
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"ns/a deleting=true", "ns/b deleting=true"}; !slices.Equal(finalized, want) {
		t.Errorf("got finalized %q, want %q", finalized, want)
	}
}

// fixture is a manager built at package initialization, before testing
// registers its flags, as a test package's shared fixture is: the test
// binary's checks must hold for it all the same.
var fixture = func() *ctrl.Manager {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), Logger: logr.Discard()})
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "fixture-labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["seen"] = "yes" // the bug: the object it was handed
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	return mgr
}()

// TestFixtureBuiltAtInit checks that a manager built before testing
// registers its flags still fails WaitIdle on a changed shared object.
func TestFixtureBuiltAtInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(start(t, fixture), 30*time.Second)
	defer cancel()
	err := fixture.WaitIdle(ctx, time.Second)
	if err == nil || !strings.Contains(err.Error(), `controller "fixture-labeler" changed the cached *v1.ConfigMap ns/a`) {
		t.Errorf("WaitIdle: %v, want the change named", err)
	}
}
