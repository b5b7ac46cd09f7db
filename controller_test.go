package ctrl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl"
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
	mgr := newManager(t, ctrl.Options{Clientset: fake.NewClientset()})
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
		{"custom resource without a dynamic client", func() error { _, err := ctrl.NewClient[*Widget](mgr); return err }(),
			"*ctrl_test.Widget (widgets.example.com/v1): no client serves custom resources"},
		{"bad label selector", func() error {
			_, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{LabelSelector: "a b"})
			return err
		}(), "label selector"},
		{"no client", func() error { _, err := ctrl.NewManager(ctrl.Options{}); return err }(), "set Options.Config"},
		{"real clientset", func() error {
			m := newManager(t, ctrl.Options{Clientset: nonFake{fake.NewClientset()}})
			_, err := ctrl.NewClient[*corev1.Pod](m)
			return err
		}(), "is not a fake clientset"},
		{"built-in registration", ctrl.Register[*corev1.Pod](ctrl.Resource{Version: "v1", Resource: "pods"}), "built-in type"},
		{"conflicting registration", ctrl.Register[*Widget](ctrl.Resource{Group: "other.com", Version: "v1", Resource: "widgets"}), "already registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", tt.err, tt.want)
			}
		})
	}
}

// nonFake is a clientset that is not client-go's fake.
type nonFake struct{ *fake.Clientset }

func (nonFake) Invokes() {}

func TestWiringAfterStart(t *testing.T) {
	mgr := newManager(t, ctrl.Options{Clientset: fake.NewClientset()})
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
		{"Owns", ctrl.Owns[*corev1.Secret](c)},
		{"FilterUpdates", c.FilterUpdates(ctrl.GenerationChanged)},
		{"OnDelete", c.OnDelete(func(context.Context, *corev1.ConfigMap) error { return nil })},
		{"Finalizer", c.Finalizer("example.com/f", func(context.Context, *corev1.ConfigMap) error { return nil })},
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

func TestFinalizerName(t *testing.T) {
	mgr := newManager(t, ctrl.Options{Clientset: fake.NewClientset()})
	c, err := ctrl.NewController(mgr, "cm", noop, ctrl.ControllerOptions{})
	must(t, err)
	fin := func(context.Context, *corev1.ConfigMap) error { return nil }
	for _, name := range []string{"", "cleanup", "Example.com/Bad Name"} {
		if err := c.Finalizer(name, fin); err == nil {
			t.Errorf("Finalizer(%q): got no error", name)
		}
	}
	must(t, c.Finalizer("example.com/cleanup", fin))
	if err := c.Finalizer("example.com/other", fin); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Errorf("second Finalizer: got %v, want already set", err)
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
				mgr := newManager(t, ctrl.Options{Clientset: fake.NewClientset(configMap("ns", "a"))})
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

// TestWaitIdleHorizon checks that a requeue due within the horizon keeps the
// manager busy and one due later does not.
func TestWaitIdleHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{Clientset: fake.NewClientset(configMap("ns", "a"))})
		var calls atomic.Int32
		_, err := ctrl.NewController(mgr, "requeue", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			if calls.Add(1) == 1 {
				return ctrl.Result{RequeueAfter: time.Hour}, nil
			}
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		ctx := start(t, mgr)
		must(t, mgr.WaitIdle(ctx, time.Minute))
		if got := calls.Load(); got != 1 {
			t.Errorf("idle with a one-minute horizon after %d reconciles, want 1", got)
		}
		must(t, mgr.WaitIdle(ctx, 2*time.Hour))
		if got := calls.Load(); got != 2 {
			t.Errorf("idle with a two-hour horizon after %d reconciles, want 2", got)
		}
	})
}

func metricValue(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}, series string) float64 {
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

var _ = testutil.ToFloat64
var _ = workqueue.DefaultTypedControllerRateLimiter[string]
var _ sync.Mutex
var _ bytes.Buffer
var _ logr.Logger
var _ = funcr.New
