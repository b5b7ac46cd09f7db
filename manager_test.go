package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, string(body)
}

func TestAddresses(t *testing.T) {
	tests := []struct {
		name string
		opts func(addr string) ctrl.Options
		addr func(ctrl.Addresses) string
		path string
		want []string
	}{
		{"metrics", func(a string) ctrl.Options {
			return ctrl.Options{MetricsAddress: a, MetricsServing: ctrl.MetricsServing{Insecure: true}}
		}, func(e ctrl.Addresses) string { return e.Metrics }, "/metrics", []string{
			`controller_runtime_reconcile_total{controller="endpoints",result="success"} 1`,
			`controller_runtime_max_concurrent_reconciles{controller="endpoints"} 1`,
			`workqueue_adds_total{controller="endpoints",name="endpoints"} 1`,
			`workqueue_depth{controller="endpoints",name="endpoints"} 0`,
			"go_goroutines",
		}},
		{"readyz", func(a string) ctrl.Options { return ctrl.Options{HealthAddress: a} }, func(e ctrl.Addresses) string { return e.Health }, "/readyz", []string{"ok"}},
		{"healthz", func(a string) ctrl.Options { return ctrl.Options{HealthAddress: a} }, func(e ctrl.Addresses) string { return e.Health }, "/healthz", []string{"ok"}},
		{"pprof", func(a string) ctrl.Options { return ctrl.Options{PprofAddress: a} }, func(e ctrl.Addresses) string { return e.Pprof }, "/debug/pprof/", []string{"goroutine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts("127.0.0.1:0")
			opts.FakeClientset = fake.NewClientset(configMap("ns", "a"))
			mgr := newManager(t, opts)
			_, err := ctrl.NewController(mgr, "endpoints", noop, ctrl.ControllerOptions{})
			must(t, err)
			start(t, mgr)
			waitIdle(t, mgr)
			code, body := get(t, "http://"+tt.addr(mgr.Addresses())+tt.path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: got status %d, want 200: %s", tt.path, code, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: body lacks %q", tt.path, w)
				}
			}
		})
	}
}

// failingWidgets returns a fake dynamic client whose Widget lists fail with
// err.
func failingWidgets(err error) *dynamicfake.FakeDynamicClient {
	dyn := newWidgetFake()
	dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) { return true, nil, err })
	return dyn
}

// TestForbidden runs a controller of Widgets, which the server forbids the
// manager to list (or to watch), beside one of ConfigMaps, which it allows:
// the ConfigMaps are reconciled at once; the refusal is one log line that
// names the rule to add, and a /readyz line; Start does not fail when
// SyncTimeout passes; and once the permission comes, the Widgets are
// reconciled and the log says so.
func TestForbidden(t *testing.T) {
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb, func(t *testing.T) {
			var allowed atomic.Bool
			forbidden := apierrors.NewForbidden(widgets.GroupResource(), "", errors.New("no"))
			dyn := newWidgetFake()
			if verb == "list" {
				dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) {
					return !allowed.Load(), nil, forbidden
				})
			} else {
				dyn.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
					return !allowed.Load(), nil, forbidden
				})
			}
			_, err := dyn.Resource(widgets).Namespace("ns").Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"namespace": "ns", "name": "w"}}}, metav1.CreateOptions{})
			must(t, err)
			var logged logLines
			mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), FakeDynamic: dyn,
				HealthAddress: "127.0.0.1:0", SyncTimeout: 100 * time.Millisecond, Logger: logged.logger()})
			var configMapsSeen, widgetsSeen atomic.Int32
			_, err = ctrl.NewController(mgr, "configmaps", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
				configMapsSeen.Add(1)
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{})
			must(t, err)
			_, err = ctrl.NewController(mgr, "widgets", func(context.Context, *Widget) (ctrl.Result, error) {
				widgetsSeen.Add(1)
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{"ns"}}})
			must(t, err)
			start(t, mgr)

			rule := `forbidden to ` + verb + ` widgets.example.com in namespace "ns": add the rule {apiGroups: ["example.com"], resources: ["widgets"], verbs: ["` +
				verb + `"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity: widgets.example.com is forbidden: no`
			var body string
			for deadline := time.Now().Add(time.Minute); !strings.Contains(body, rule); {
				if time.Now().After(deadline) {
					t.Fatalf("readyz: got %q, want a line with %q", body, rule)
				}
				time.Sleep(time.Millisecond) // polling the endpoint, not waiting for the controller
				if addr := mgr.Addresses().Health; addr != "" {
					_, body = get(t, "http://"+addr+"/readyz")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second) // well past SyncTimeout
			err = mgr.WaitIdle(ctx, time.Minute)
			cancel()
			if want := `still busy: *ctrl_test.Widget (widgets.example.com/v1) in namespace "ns": ` + rule; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("WaitIdle: got %v, want %q", err, want)
			}
			if n := configMapsSeen.Load(); n != 1 {
				t.Errorf("%d reconciles of ConfigMaps while Widgets are forbidden, want 1", n)
			}
			if n := logged.count(`"forbidden: grant the RBAC rule; retrying meanwhile"`); n != 1 || logged.count(`verbs: [\"`+verb+`\"]}`) != 1 {
				t.Errorf("%d log lines about the refusal, want 1, with the rule:\n%s", n, logged.String())
			}

			allowed.Store(true)
			waitIdle(t, mgr)
			if n := widgetsSeen.Load(); n != 1 {
				t.Errorf("%d reconciles of Widgets once allowed, want 1", n)
			}
			if n := logged.count(`"verb"="` + verb + `" "forbiddenFor"=`); n != 1 {
				t.Errorf("%d lines saying the %s is allowed now, want 1:\n%s", n, verb, logged.String())
			}
			for _, s := range []string{"lost the watch", "watch is back"} {
				if n := logged.count(s); n != 0 {
					t.Errorf("%d lines %q, want none:\n%s", n, s, logged.String())
				}
			}
		})
	}
}

// logLines is a logger that keeps its lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func TestSyncErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"missing CRD", apierrors.NewNotFound(widgets.GroupResource(), ""),
			`*ctrl_test.Widget (widgets.example.com/v1) in namespace "ns" is not served by the API server (is its CustomResourceDefinition installed?)`},
		{"sync timeout", apierrors.NewInternalError(errors.New("etcd is sad")),
			`*ctrl_test.Widget (widgets.example.com/v1) in namespace "ns" did not sync within 300ms: Internal error occurred: etcd is sad`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr := newManager(t, ctrl.Options{FakeDynamic: failingWidgets(tt.err), SyncTimeout: 300 * time.Millisecond})
			_, err := ctrl.NewController(mgr, "w", func(context.Context, *Widget) (ctrl.Result, error) { return ctrl.Result{}, nil },
				ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{"ns"}}})
			must(t, err)
			err = mgr.Start(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			if err := mgr.WaitIdle(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "manager stopped") {
				t.Errorf("WaitIdle after a failed Start: got %v, want manager stopped", err)
			}
		})
	}
}

// TestFakeDynamicWithoutListKind starts a manager on a fake dynamic client
// that does not know the Widget's list kind, made as Options.FakeDynamic's
// doc warns against: Start fails at once, saying what to do, where the fake
// would panic in the cache's goroutine.
func TestFakeDynamicWithoutListKind(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeDynamic: dynamicfake.NewSimpleDynamicClient(kruntime.NewScheme())})
	_, err := ctrl.NewCache[*Widget](mgr, ctrl.CacheOptions{})
	must(t, err)
	err = mgr.Start(context.Background())
	want := "ctrl: *ctrl_test.Widget (widgets.example.com/v1) cannot be listed: *ctrl_test.Widget (widgets.example.com/v1): the fake dynamic client does not know the resource's list kind: create it with ctrltest.NewFakeDynamic"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %q...", err, want)
	}
}

func TestBindError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), MetricsAddress: ln.Addr().String()})
	err = mgr.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Start with a taken port: got %v, want an address-in-use error", err)
	}
}

// TestRecorder checks that WaitIdle covers the Events the reconciles
// emitted: once it returns they are on the server, with no polling.
func TestRecorder(t *testing.T) {
	const n = 20
	var seed []kruntime.Object
	for i := range n {
		seed = append(seed, configMap("ns", fmt.Sprintf("cm%02d", i)))
	}
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(seed...)})
	rec, err := ctrl.NewRecorder[*corev1.ConfigMap](mgr, "recorder-test")
	must(t, err)
	_, err = ctrl.NewController(mgr, "recorder", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		rec.Eventf(cm, corev1.EventTypeNormal, "Seen", "saw %s", cm.Name)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	events, err := ctrl.NewClient[*corev1.Event](mgr, ctrl.ClientOptions{})
	must(t, err)
	list, err := events.Uncached().List(ctx, ctrl.ListParams{Namespace: "ns"})
	must(t, err)
	if len(list) != n {
		t.Fatalf("got %d events once idle, want %d", len(list), n)
	}
	for _, e := range list {
		if e.Reason != "Seen" || e.Message != "saw "+e.InvolvedObject.Name || e.InvolvedObject.Kind != "ConfigMap" || e.InvolvedObject.APIVersion != "v1" ||
			e.InvolvedObject.UID != types.UID("ns-"+e.InvolvedObject.Name) || e.Source.Component != "recorder-test" || e.Count != 1 || e.Type != corev1.EventTypeNormal {
			t.Errorf("got event %+v", e)
		}
	}
}

func TestLeaderElectionOnFake(t *testing.T) {
	cs := fake.NewClientset(configMap("ns", "a"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs, Namespace: "ns",
		LeaderElection: ctrl.LeaderElection{Name: "test-lock", LeaseOptions: ctrl.LeaseOptions{Identity: "me", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}}})
	_, err := ctrl.NewController(mgr, "leader", noop, ctrl.ControllerOptions{})
	must(t, err)
	leases, err := ctrl.NewClient[*coordinationv1.Lease](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	waitIdle(t, mgr)
	l, err := leases.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "test-lock"})
	must(t, err)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "me" {
		t.Errorf("while leading: got holder %v, want me", l.Spec.HolderIdentity)
	}
	if got := metricValue(t, mgr.Registry(), `leader_election_master_status{name="test-lock"}`); got != 1 {
		t.Errorf("leader_election_master_status: got %v, want 1", got)
	}
	cancel()
	must(t, <-done)
	l, err = leases.Uncached().Get(context.Background(), ctrl.Key{Namespace: "ns", Name: "test-lock"})
	must(t, err)
	if l.Spec.HolderIdentity != nil {
		t.Errorf("after a clean stop: got holder %q, want none (released)", *l.Spec.HolderIdentity)
	}
	var _ = metav1.Now
}

func TestLeaderElectionValidation(t *testing.T) {
	_, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(),
		LeaderElection: ctrl.LeaderElection{Name: "x", LeaseOptions: ctrl.LeaseOptions{LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}}})
	if err == nil || !strings.Contains(err.Error(), "LeaseDuration 1s must be longer than RenewDeadline 2s") {
		t.Errorf("got %v, want a duration error", err)
	}
}
