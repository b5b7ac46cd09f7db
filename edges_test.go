package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl"
)

// TestRecorderAfterStart checks that a Recorder made once the manager runs
// sends its events.
func TestRecorderAfterStart(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
	var rec atomic.Pointer[ctrl.Recorder[*corev1.ConfigMap]]
	c, err := ctrl.NewController(mgr, "late-recorder", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if r := rec.Load(); r != nil {
			r.Event(cm, corev1.EventTypeNormal, "Seen", "seen late")
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	r, err := ctrl.NewRecorder[*corev1.ConfigMap](mgr, "late")
	must(t, err)
	rec.Store(r)
	c.Enqueue(ctrl.Key{Namespace: "ns", Name: "a"})
	waitIdle(t, mgr)
	events, err := ctrl.NewClient[*corev1.Event](mgr, ctrl.ClientOptions{})
	must(t, err)
	list, err := events.Uncached().List(ctx, ctrl.ListParams{Namespace: "ns"})
	must(t, err)
	if len(list) != 1 || list[0].Message != "seen late" {
		t.Fatalf("got events %v once idle, want the one recorded after Start", list)
	}
}

// TestWatchErrorOncePerFailure counts the calls of the watch error handler
// against the failed list requests.
func TestWatchErrorOncePerFailure(t *testing.T) {
	forbidden := apierrors.NewForbidden(widgets.GroupResource(), "", errors.New("no"))
	dyn := failingWidgets(forbidden)
	mgr := newManager(t, ctrl.Options{FakeDynamic: dyn, SyncTimeout: time.Hour})
	cache, err := ctrl.NewCache[*Widget](mgr, ctrl.CacheOptions{Namespaces: []string{"ns"}})
	must(t, err)
	var calls atomic.Int32
	cache.SetWatchErrorHandler(func(err error) {
		if !apierrors.IsForbidden(err) {
			t.Errorf("watch error handler: got %v, want the list's Forbidden", err)
		}
		calls.Add(1)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	lists := func() int {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "list" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); calls.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("watch error handler called %d times for %d lists after 30s, want 3", calls.Load(), lists())
		}
		time.Sleep(time.Millisecond) // polling the handler's count
	}
	cancel()
	must(t, <-done)
	// A list that fails as the manager stops is not reported: its error
	// may be the stop's own.
	if got, n := int(calls.Load()), lists(); got > n || got < n-1 {
		t.Errorf("watch error handler called %d times for %d failed lists, want once each (the last one, during the stop, maybe not)", got, n)
	}
}

// countingLimiter is a rate limiter that counts its uses and never delays.
type countingLimiter struct{ when atomic.Int32 }

func (l *countingLimiter) When(ctrl.Key) time.Duration { l.when.Add(1); return 0 }
func (l *countingLimiter) Forget(ctrl.Key)             {}
func (l *countingLimiter) NumRequeues(ctrl.Key) int    { return 0 }

// TestOutageWaitsForServer checks what a reconcile that fails because the
// API server is unreachable does: its key waits for the server, without
// touching the rate limiter, and is retried once the server answers. Only
// the manager's own requests to the API server say so: a request that ends
// on a deadline of the reconcile's own, and an outside service's error of
// any type (the same *url.Error a failed connection to the API server
// gives), are ordinary failures, retried with backoff.
func TestOutageWaitsForServer(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name        string
		serverErr   error // what the API server's request fails with
		ownDeadline bool  // the reconcile's context has expired
		outsideErr  error // what reconcile returns instead of reading
		wantLimiter int32 // uses of the rate limiter
		wantWaited  float64
	}{
		{name: "unavailable", serverErr: apierrors.NewServiceUnavailable("starting"), wantWaited: 3},
		{name: "connection refused", serverErr: &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api", Err: refused}, wantWaited: 3},
		{name: "client timeout", serverErr: fmt.Errorf("get: %w", context.DeadlineExceeded), wantWaited: 3},
		{name: "own deadline", serverErr: fmt.Errorf("get: %w", context.DeadlineExceeded), ownDeadline: true, wantLimiter: 3},
		{name: "outside service", outsideErr: &url.Error{Op: "Get", URL: "https://cloud.example/v1/buckets", Err: refused}, wantLimiter: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cs := fake.NewClientset(configMap("ns", "a"))
				var failures atomic.Int32
				cs.PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
					if failures.Add(1) <= 3 {
						return true, nil, tt.serverErr
					}
					return true, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}, nil
				})
				mgr := newManager(t, ctrl.Options{FakeClientset: cs})
				secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
				must(t, err)
				limiter := &countingLimiter{}
				var calls atomic.Int32
				_, err = ctrl.NewController(mgr, "outage", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
					n := calls.Add(1)
					if tt.outsideErr != nil {
						if n <= 3 {
							return ctrl.Result{}, fmt.Errorf("creating the bucket: %w", tt.outsideErr)
						}
						return ctrl.Result{}, nil
					}
					if tt.ownDeadline && n <= 3 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithDeadline(ctx, time.Now())
						defer cancel()
					}
					_, err := secrets.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "s"})
					return ctrl.Result{}, err
				}, ctrl.ControllerOptions{RateLimiter: limiter})
				must(t, err)
				ctx := start(t, mgr)
				must(t, mgr.WaitIdle(ctx, time.Hour))
				if got := calls.Load(); got != 4 {
					t.Errorf("got %d reconciles, want 4: three failures, then success", got)
				}
				if got := limiter.when.Load(); got != tt.wantLimiter {
					t.Errorf("rate limiter used %d times, want %d", got, tt.wantLimiter)
				}
				reg := mgr.Registry()
				if got := metricValue(t, reg, `ctrl_retries_released_total{controller="outage"}`); got != tt.wantWaited {
					t.Errorf("ctrl_retries_released_total: got %v, want %v", got, tt.wantWaited)
				}
				if got := metricValue(t, reg, `ctrl_keys_waiting_for_server{controller="outage"}`); got != 0 {
					t.Errorf("ctrl_keys_waiting_for_server once idle: got %v, want 0", got)
				}
				if got := metricValue(t, reg, `ctrl_wait_after_recovery_seconds{controller="outage"}`); got != tt.wantWaited {
					t.Errorf("ctrl_wait_after_recovery_seconds: got %v observations, want %v", got, tt.wantWaited)
				}
			})
		})
	}
}

// TestTerminalOnDelete checks that a terminal error from OnDelete ends that
// deletion: the hook is not called again for it, not even when a new
// object takes the name.
func TestTerminalOnDelete(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
	var mu sync.Mutex
	var gone []string
	c, err := ctrl.NewController(mgr, "terminal", noop, ctrl.ControllerOptions{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Key](0, 0)})
	must(t, err)
	must(t, c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		gone = append(gone, string(cm.UID))
		return ctrl.Terminal(errors.New("cannot clean up"))
	}))
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	must(t, client.Delete(ctx, ctrl.Key{Namespace: "ns", Name: "a"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	again := configMap("ns", "a")
	again.UID = "second"
	_, err = client.Create(ctx, again)
	must(t, err)
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"ns-a"}; !slices.Equal(gone, want) {
		t.Errorf("OnDelete calls: got %q, want %q", gone, want)
	}
}

// TestResyncThroughBacklog checks that ResyncPeriod belongs to the
// controller: two controllers that differ only in it share one cache, and
// each reconciles every object again at its own period, with the cause
// TriggerResync.
func TestResyncThroughBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"), configMap("ns", "b"))})
		var mu sync.Mutex
		counts := map[string]int{}
		reconcile := func(name string) func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
			return func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				counts[name+"/"+cm.Name]++
				for _, c := range ctrl.RequestFrom(ctx).Causes.First {
					counts[name+":"+string(c.Trigger)]++
				}
				return ctrl.Result{}, nil
			}
		}
		fast, err := ctrl.NewController(mgr, "fast", reconcile("fast"), ctrl.ControllerOptions{ResyncPeriod: time.Minute})
		must(t, err)
		slow, err := ctrl.NewController(mgr, "slow", reconcile("slow"), ctrl.ControllerOptions{ResyncPeriod: time.Hour})
		must(t, err)
		if fast.Cache() != slow.Cache() {
			t.Error("controllers that differ only in ResyncPeriod have two caches, want one")
		}
		ctx := start(t, mgr)
		must(t, mgr.WaitIdle(ctx, 0))
		time.Sleep(150 * time.Second) // fake time: two periods of the fast one
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{
			"fast/a": 3, "fast/b": 3, "fast:listed": 2, "fast:resync": 4,
			"slow/a": 1, "slow/b": 1, "slow:listed": 2,
		}
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Errorf("got %v, want %v", counts, want)
		}
	})
}

// TestCauses checks the causes a reconcile learns, through de-duplication:
// its own object's changes, a trigger, a requeue; and that they reach the
// log line and the metrics.
func TestCauses(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), Logger: log})
	var got []ctrl.Causes
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	var firstCtx context.Context // kept past its reconcile
	c, err := ctrl.NewController(mgr, "causes", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		logr.FromContextOrDiscard(ctx).Info("reconciling")
		if first.Swap(false) {
			firstCtx = ctx
			close(entered)
			<-release // hold the key while more causes arrive
		}
		mu.Lock()
		got = append(got, ctrl.RequestFrom(ctx).Causes)
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	c.Enqueue(ctrl.Key{Namespace: "ns", Name: "a"}) // before Start: nothing
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	<-entered
	for i := range 6 {
		_, err := client.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "a"}, "application/merge-patch+json", fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i))
		must(t, err)
	}
	c.Enqueue(ctrl.Key{Namespace: "ns", Name: "a"})
	close(release)
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	// The six updates and the trigger arrive while the first reconcile
	// runs; the watch may deliver the last updates after it ends, so they
	// may come in one reconcile or two.
	if len(got) < 2 || got[0].String() != "listed ConfigMap ns/a" {
		t.Fatalf("causes: got %v, want the list first", got)
	}
	total := 0
	for _, cs := range got[1:] {
		total += cs.Total
		if len(cs.First) > 4 {
			t.Errorf("%d causes kept, want at most 4", len(cs.First))
		}
		for _, c := range cs.First {
			if c.Trigger != ctrl.TriggerUpdated && c.Trigger != ctrl.TriggerEnqueued {
				t.Errorf("cause %v, want updated or enqueued", c)
			}
		}
	}
	if total != 7 || got[1].Total < 5 {
		t.Errorf("causes after the list: got %v, want 7 in all, most in the first reconcile", got[1:])
	}
	// The queue reuses a taken key's record for the keys queued after; a
	// context kept past its reconcile still tells its own causes.
	if cs := ctrl.RequestFrom(firstCtx).Causes; cs.String() != "listed ConfigMap ns/a" || cs.Total != 1 {
		t.Errorf("RequestFrom(the first reconcile's context) after later reconciles: causes %v (total %d), want listed ConfigMap ns/a", cs, cs.Total)
	}
	var logged bool
	for _, l := range lines {
		logged = logged || strings.Contains(l, `"causes"="listed ConfigMap ns/a"`)
	}
	if !logged {
		t.Errorf("no reconcile log line carries its causes: %q", lines)
	}
	reg := mgr.Registry()
	for series, want := range map[string]float64{
		`ctrl_reconcile_causes_total{controller="causes",reason="listed"}`:  1,
		`ctrl_reconcile_causes_total{controller="causes",reason="updated"}`: float64(len(got) - 1),
	} {
		if got := metricValue(t, reg, series); got != want {
			t.Errorf("%s: got %v, want %v", series, got, want)
		}
	}
}

// A member cluster whose reconciles are slow does not take every worker:
// while two of its objects are being reconciled (they block until the test
// lets them go), an object of another member, queued behind eighteen more
// of the slow member's, is reconciled by the second worker. Then every
// object of the slow member is reconciled (a key both the member's list and
// the controller's start queued may be reconciled twice).
func TestSlowClusterDoesNotStarveOthers(t *testing.T) {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset()})
	must(t, err)
	var objs []runtime.Object
	for i := range 20 {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%02d", i)}})
	}
	slow, quick := fake.NewClientset(objs...), fake.NewClientset()
	must(t, mgr.Engage("slow", ctrl.Member{FakeClientset: slow}))
	must(t, mgr.Engage("quick", ctrl.Member{FakeClientset: quick}))
	release := make(chan struct{})
	var blocked atomic.Int32
	var slowKeys sync.Map
	quickDone := make(chan struct{})
	_, err = ctrl.NewController(mgr, "fair", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		switch ctrl.RequestFrom(ctx).Key.Cluster {
		case "slow":
			blocked.Add(1)
			slowKeys.Store(cm.Name, true)
			select {
			case <-release:
			case <-ctx.Done():
			}
		case "quick":
			close(quickDone)
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 2, Cache: ctrl.CacheOptions{Fleet: true}})
	must(t, err)
	ctx := start(t, mgr)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// Wait for the slow member's first reconcile, so that the quick
	// member's object is queued behind the rest of the slow ones.
	for deadline := time.Now().Add(30 * time.Second); blocked.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no reconcile of the slow member began")
		}
		time.Sleep(time.Millisecond)
	}
	_, err = quick.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "q"}}, metav1.CreateOptions{})
	must(t, err)
	select {
	case <-quickDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("the quick member's object was not reconciled while %d of the slow member's reconciles were running", blocked.Load())
	}
	if n := blocked.Load(); n != 1 {
		t.Errorf("%d reconciles of the slow member began, want 1 of 2 workers", n)
	}
	close(release)
	waitIdle(t, mgr)
	n := 0
	slowKeys.Range(func(any, any) bool { n++; return true })
	if n != 20 {
		t.Errorf("%d of the slow member's 20 objects reconciled", n)
	}
}

// TestDisengageDuringStart engages and disengages a member while Start
// prepares the controllers: the race detector checks that a member that
// leaves reads each controller's queue under the lock Start writes it
// under.
func TestDisengageDuringStart(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	for i := range 4 {
		_, err := ctrl.NewController(mgr, fmt.Sprintf("fleet-%d", i), noop,
			ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Fleet: true}})
		must(t, err)
	}
	must(t, mgr.Engage("member", ctrl.Member{FakeClientset: fake.NewClientset()}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			mgr.Disengage("member")
			_ = mgr.Engage("member", ctrl.Member{FakeClientset: fake.NewClientset()})
		}
	}()
	start(t, mgr)
	<-done
	waitIdle(t, mgr)
}
