package ctrl_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// readyz returns the status and body of mgr's /readyz.
func readyz(t *testing.T, mgr *ctrl.Manager) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + mgr.Addresses().Health + "/readyz")
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, string(body)
}

// crdClient returns a client of CustomResourceDefinitions, whose writes
// WaitIdle waits for.
func crdClient(t *testing.T, mgr *ctrl.Manager) *ctrl.Client[*unstructured.Unstructured] {
	t.Helper()
	c, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: ctrl.APIResource{
		Group: crds.Group, Version: crds.Version, Resource: crds.Resource, Kind: "CustomResourceDefinition", ClusterScoped: true}})
	must(t, err)
	return c
}

// TestOptionalKind follows a CRD through its life on the fakes: absent at
// start, installed, deleted with objects the cache still holds (removed
// as deletions), installed again, and changed to stop serving the cache's
// version (objects forgotten, not deleted).
func TestOptionalKind(t *testing.T) {
	var logs logLines
	mgr := newManager(t, ctrl.Options{FakeDynamic: newOptionalFake(), HealthAddress: "127.0.0.1:0", Logger: logs.logger()})
	var mu sync.Mutex
	reconciled, deleted := map[string]int{}, map[string]int{}
	c, err := ctrl.NewController(mgr, "widgets", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		mu.Lock()
		reconciled[w.Name]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Optional: true}})
	must(t, err)
	must(t, c.OnDelete(func(ctx context.Context, w *Widget) error {
		mu.Lock()
		deleted[w.Name]++
		mu.Unlock()
		return nil
	}))
	widgetClient, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	must(t, err)
	crdc := crdClient(t, mgr)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	gauge := `ctrl_cache_waiting_for_crd{resource="widgets.example.com"}`
	check := func(step string, served bool, ready string, gaugeWant float64) {
		t.Helper()
		if got := c.Cache().Served(); got != served {
			t.Errorf("%s: Served: got %v, want %v", step, got, served)
		}
		code, body := readyz(t, mgr)
		if code != http.StatusOK {
			t.Errorf("%s: /readyz: got %d, want 200 (an optional kind does not make the manager unready)", step, code)
		}
		if ready == "" && strings.Contains(body, "waiting for") || ready != "" && !strings.Contains(body, ready) {
			t.Errorf("%s: /readyz: got %q, want it to say %q", step, body, ready)
		}
		if got := metricValue(t, mgr.Registry(), gauge); got != gaugeWant {
			t.Errorf("%s: %s: got %v, want %v", step, gauge, got, gaugeWant)
		}
	}
	check("not installed", false, `waiting for CustomResourceDefinition widgets.example.com (not installed): *ctrl_test.Widget (widgets.example.com/v1), for controllers "widgets"`, 1)
	// Reads answer as the server would: the kind has no objects.
	if _, err := widgetClient.Get(ctx, ctrl.Key{Namespace: "ns", Name: "w"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Get while waiting: got %v, want not found", err)
	}
	if list, err := widgetClient.List(ctx, ctrl.ListParams{}); err != nil || len(list) != 0 {
		t.Errorf("List while waiting: got %v, %v; want none", list, err)
	}

	must(t, installCRD(ctx, mgr, widgets))
	waitIdle(t, mgr)
	check("installed", true, "", 0)
	for _, name := range []string{"a", "b"} {
		_, err := widgetClient.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}})
		must(t, err)
	}
	waitIdle(t, mgr)

	// The CRD deleted while the cache still holds a and b, as if their
	// deletions had been lost: a CRD is removed after its objects, so
	// they are deletions.
	must(t, crdc.Delete(ctx, ctrl.Key{Name: "widgets.example.com"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	check("deleted", false, "(deleted)", 1)
	mu.Lock()
	if deleted["a"] != 1 || deleted["b"] != 1 {
		t.Errorf("OnDelete after the CRD went: got %v, want a and b once each", deleted)
	}
	mu.Unlock()
	if n := len(c.Cache().List("", nil)); n != 0 {
		t.Errorf("cached while waiting: got %d objects, want none", n)
	}

	// Installed again: the objects the fake still holds are listed, and
	// reconciled again.
	must(t, installCRD(ctx, mgr, widgets))
	waitIdle(t, mgr)
	check("installed again", true, "", 0)
	mu.Lock()
	if reconciled["a"] != 2 || reconciled["b"] != 2 {
		t.Errorf("reconciles after the CRD came back: got %v, want a and b twice each", reconciled)
	}
	mu.Unlock()

	// The CRD stops serving v1: a and b still exist, at v2; they are
	// forgotten, not deleted.
	crd, err := crdc.Uncached().Get(ctx, ctrl.Key{Name: "widgets.example.com"})
	must(t, err)
	must(t, unstructured.SetNestedSlice(crd.Object, []any{map[string]any{"name": "v2", "served": true}}, "spec", "versions"))
	_, err = crdc.Update(ctx, crd)
	must(t, err)
	waitIdle(t, mgr)
	check("v1 not served", false, "(does not serve version v1)", 1)
	mu.Lock()
	if deleted["a"] != 1 || deleted["b"] != 1 {
		t.Errorf("OnDelete after the CRD stopped serving v1: got %v, want a and b once each, from before", deleted)
	}
	mu.Unlock()

	for _, want := range []struct {
		line string
		n    int
	}{
		{`"reason"="not installed"`, 1},
		{`"reason"="deleted"`, 1},
		{`"reason"="does not serve version v1"`, 1},
		{"CustomResourceDefinition is established: listing", 2},
	} {
		if got := logs.count(want.line); got != want.n {
			t.Errorf("log lines with %s: got %d, want %d", want.line, got, want.n)
		}
	}
}

// TestOptionalWiring checks that a cache is optional or required, not both,
// that Owns takes whichever exists, and that built-in kinds cannot be
// optional.
func TestOptionalWiring(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeDynamic: newOptionalFake(), FakeClientset: fake.NewClientset()})
	optional, err := ctrl.NewCache[*Widget](mgr, ctrl.CacheOptions{Optional: true})
	must(t, err)
	_, err = ctrl.NewController(mgr, "required", func(context.Context, *Widget) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	if err == nil || !strings.Contains(err.Error(), "asked for as required, but it exists as optional") {
		t.Errorf("a required controller over an optional cache: got %v, want an error", err)
	}
	c, err := ctrl.NewController(mgr, "owner", noop, ctrl.ControllerOptions{})
	must(t, err)
	owned, err := ctrl.Owns[*Widget](c)
	must(t, err)
	if owned != optional {
		t.Errorf("Owns: got another cache, want the optional one")
	}
	same, err := ctrl.NewCache[*Widget](mgr, ctrl.CacheOptions{Optional: true})
	must(t, err)
	if same != optional {
		t.Errorf("NewCache again: got another cache, want the optional one")
	}
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Optional: true})
	if err == nil || !strings.Contains(err.Error(), "built in") {
		t.Errorf("an optional ConfigMap cache: got %v, want an error", err)
	}
}

// pollGoroutines returns the counts of goroutines with frames once they
// are want, or after 10 s.
func pollGoroutines(frames []string, want map[string]int) (got, _ map[string]int) {
	got = goroutines(frames...)
	for deadline := time.Now().Add(10 * time.Second); !equalCounts(got, want) && time.Now().Before(deadline); got = goroutines(frames...) {
		time.Sleep(10 * time.Millisecond) // polling the runtime's goroutines
	}
	return got, want
}

// goroutines counts the goroutines whose stacks hold each of frames.
func goroutines(frames ...string) map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range frames {
			if strings.Contains(g, f) {
				out[f]++
			}
		}
	}
	return out
}

// TestStopLeavesNothing stops one of two controllers while the manager
// runs: its workers, resync loop, queue and the caches only it used are
// gone, and the other controller goes on.
func TestStopLeavesNothing(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}})})
	var cmCalls, secretCalls atomic.Int32
	_, err := ctrl.NewController(mgr, "configmaps", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		cmCalls.Add(1)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	secrets, err := ctrl.NewController(mgr, "secrets", func(context.Context, *corev1.Secret) (ctrl.Result, error) {
		secretCalls.Add(1)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 3, ResyncPeriod: time.Hour})
	must(t, err)
	_, err = ctrl.Owns[*corev1.Pod](secrets)
	must(t, err)
	nodes, err := ctrl.NewCache[*corev1.Node](mgr, ctrl.CacheOptions{})
	must(t, err)
	must(t, ctrl.Watches(secrets, nodes, func(*corev1.Node) []ctrl.Key { return nil }))
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	frames := []string{").work(", ").resync(", ").waitingLoop(", "internal/watcher.Run("}
	// Goroutines run their first line when the scheduler gets to them, and
	// client-go's delaying queue ends its loop after the queue's shutdown,
	// which Stop does not wait for: poll, before and after.
	if got, want := pollGoroutines(frames, map[string]int{frames[0]: 4, frames[1]: 1, frames[2]: 2, frames[3]: 4}); !equalCounts(got, want) {
		t.Fatalf("before Stop: got goroutines %v, want %v", got, want)
	}
	must(t, secrets.Stop(ctx))
	// ConfigMaps' cache and workers remain; Nodes' cache too, which
	// NewCache made; Secrets' and Pods' caches go.
	if got, want := pollGoroutines(frames, map[string]int{frames[0]: 1, frames[1]: 0, frames[2]: 1, frames[3]: 2}); !equalCounts(got, want) {
		t.Errorf("after Stop: got goroutines %v, want %v", got, want)
	}
	if err := secrets.Stop(ctx); err != nil {
		t.Errorf("Stop again: got %v, want nil", err)
	}
	client, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	must(t, err)
	if _, err := client.Get(ctx, ctrl.Key{Namespace: "ns", Name: "s"}); err == nil || !strings.Contains(err.Error(), "no cache of") {
		t.Errorf("Get of a Secret after Stop: got %v, want no cache", err)
	}
	if got := metricValue(t, mgr.Registry(), `controller_runtime_max_concurrent_reconciles{controller="secrets"}`); got != 0 {
		t.Errorf("the stopped controller's series: got %v, want gone", got)
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	_, err = cms.Create(ctx, configMap("ns", "b"))
	must(t, err)
	_, err = client.Uncached().Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t"}})
	must(t, err)
	waitIdle(t, mgr)
	if got := cmCalls.Load(); got != 2 {
		t.Errorf("ConfigMap reconciles: got %d, want 2", got)
	}
	if got := secretCalls.Load(); got != 1 {
		t.Errorf("Secret reconciles: got %d, want 1, before Stop", got)
	}
}

func equalCounts(got, want map[string]int) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestStopEdges: before Start, the name is free again and the manager
// starts without the controller; a reconcile that outlives Stop's context
// has its own canceled.
func TestStopEdges(t *testing.T) {
	t.Run("before Start", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		c, err := ctrl.NewController(mgr, "cm", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
			t.Error("a stopped controller reconciled")
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		_, err = ctrl.Owns[*corev1.Secret](c)
		must(t, err)
		must(t, c.Stop(context.Background()))
		var calls atomic.Int32
		_, err = ctrl.NewController(mgr, "cm", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
			calls.Add(1)
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		if _, err := ctrl.Owns[*corev1.Secret](c); err == nil {
			t.Error("Owns on a stopped controller: got nil, want an error")
		}
		start(t, mgr)
		waitIdle(t, mgr)
		if got := calls.Load(); got != 1 {
			t.Errorf("reconciles of the new controller: got %d, want 1", got)
		}
	})
	t.Run("reconcile outlives ctx", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		entered, ended := make(chan struct{}), make(chan error, 1)
		c, err := ctrl.NewController(mgr, "cm", func(ctx context.Context, _ *corev1.ConfigMap) (ctrl.Result, error) {
			close(entered)
			<-ctx.Done()
			ended <- ctx.Err()
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		start(t, mgr)
		<-entered
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err = c.Stop(ctx)
		if err == nil || !strings.Contains(err.Error(), "1 reconciles still running") {
			t.Errorf("Stop: got %v, want 1 reconcile still running", err)
		}
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Errorf("the running reconcile's context: got %v, want canceled", err)
		}
	})
}

// TestUnwatch removes a Watches added while the manager runs; the source
// cache, made by NewCache, stays.
func TestUnwatch(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
	var mu sync.Mutex
	var causes []string
	c, err := ctrl.NewController(mgr, "cm", func(ctx context.Context, _ *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		causes = append(causes, ctrl.RequestFrom(ctx).Causes.String())
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	secretCache, err := ctrl.NewCache[*corev1.Secret](mgr, ctrl.CacheOptions{})
	must(t, err)
	secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	toA := func(*corev1.Secret) []ctrl.Key { return []ctrl.Key{{Namespace: "ns", Name: "a"}} }
	must(t, ctrl.Watches(c, secretCache, toA))
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s1"}})
	must(t, err)
	waitIdle(t, mgr)
	must(t, ctrl.Unwatch(c, secretCache))
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s2"}})
	must(t, err)
	waitIdle(t, mgr)
	mu.Lock()
	want := []string{"listed ConfigMap ns/a", "mapped Secret ns/s1"}
	if !slices.Equal(causes, want) {
		t.Errorf("reconciles: got %q, want %q", causes, want)
	}
	mu.Unlock()
	if _, err := secrets.Get(ctx, ctrl.Key{Namespace: "ns", Name: "s2"}); err != nil {
		t.Errorf("Get from the Watches source after Unwatch: got %v, want it cached still", err)
	}
	if err := ctrl.Unwatch(c, secretCache); err == nil {
		t.Error("Unwatch again: got nil, want an error")
	}
}

// TestSetNamespaces moves a controller with a finalizer and an Owns from
// one namespace to another: the new namespace's objects are reconciled
// and its children read through the followed Owns cache; the old one's
// are forgotten, without OnDelete or finalize (an object that leaves a
// selector would be finalized), and keep the controller's finalizer.
func TestSetNamespaces(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("a", "x"), configMap("b", "y"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "y-secret"}})})
	secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
	must(t, err)
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	var mu sync.Mutex
	var reconciled, gone, finalized []string
	var readErrs []error
	c, err := ctrl.NewController(mgr, "cm", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		reconciled = append(reconciled, ctrl.KeyOf(cm).String())
		// Through an index of the Owns cache, which moves with it.
		if _, err := secrets.List(ctx, ctrl.ListParams{Namespace: cm.Namespace, Index: "name", IndexValue: cm.Name + "-secret"}); err != nil {
			readErrs = append(readErrs, err)
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{"a"}}})
	must(t, err)
	owned, err := ctrl.Owns[*corev1.Secret](c)
	must(t, err)
	must(t, owned.AddIndex("name", func(s *corev1.Secret) []string { return []string{s.Name} }))
	must(t, c.OnDelete(func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		gone = append(gone, ctrl.KeyOf(cm).String())
		mu.Unlock()
		return nil
	}))
	must(t, c.OnFinalize("example.com/cleanup", func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		finalized = append(finalized, ctrl.KeyOf(cm).String())
		mu.Unlock()
		return nil
	}))
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	must(t, c.Cache().SetNamespaces("b"))
	waitIdle(t, mgr)
	mu.Lock()
	slices.Sort(reconciled)
	if want := []string{"a/x", "b/y"}; !slices.Equal(slices.Compact(reconciled), want) {
		t.Errorf("reconciled: got %q, want %q", reconciled, want)
	}
	if len(gone) != 0 || len(finalized) != 0 || len(readErrs) != 0 {
		t.Errorf("OnDelete: got %q, finalize: got %q, want neither; reads of Secrets: got errors %v, want none", gone, finalized, readErrs)
	}
	mu.Unlock()
	x, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: "a", Name: "x"})
	must(t, err)
	if !slices.Contains(x.Finalizers, "example.com/cleanup") {
		t.Errorf("a/x on the server: got finalizers %q, want the controller's kept", x.Finalizers)
	}
	same, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Namespaces: []string{"b"}})
	must(t, err)
	if same != c.Cache() {
		t.Error("NewCache with the new namespaces: got another cache, want the controller's")
	}
	if err := c.Cache().SetNamespaces(); err != nil {
		t.Errorf("SetNamespaces to all: %v", err)
	}
	waitIdle(t, mgr)
	if n := len(c.Cache().List("", nil)); n != 2 {
		t.Errorf("cached in every namespace: got %d ConfigMaps, want 2", n)
	}
	nodes, err := ctrl.NewCache[*corev1.Node](mgr, ctrl.CacheOptions{})
	must(t, err)
	if err := nodes.SetNamespaces("a"); err == nil {
		t.Error("SetNamespaces of a cluster-scoped kind: got nil, want an error")
	}
}

// TestReconcileTimeout counts a reconcile that runs past its deadline, and
// retries it.
func TestReconcileTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a"))})
		var calls atomic.Int32
		var began, ended time.Time
		_, err := ctrl.NewController(mgr, "slow", func(ctx context.Context, _ *corev1.ConfigMap) (ctrl.Result, error) {
			if calls.Add(1) > 1 {
				return ctrl.Result{}, nil
			}
			began = time.Now()
			<-ctx.Done()
			ended = time.Now()
			return ctrl.Result{}, ctx.Err()
		}, ctrl.ControllerOptions{ReconcileTimeout: 3 * time.Second})
		must(t, err)
		ctx := start(t, mgr)
		must(t, mgr.WaitIdle(ctx, time.Minute))
		if got := ended.Sub(began); got != 3*time.Second {
			t.Errorf("the reconcile's context ended after %s, want 3s", got)
		}
		if got := calls.Load(); got != 2 {
			t.Errorf("reconciles: got %d, want 2 (a retry)", got)
		}
		for series, want := range map[string]float64{
			`ctrl_reconcile_timeouts_total{controller="slow"}`:                       1,
			`controller_runtime_reconcile_errors_total{controller="slow"}`:           1,
			`controller_runtime_reconcile_total{controller="slow",result="success"}`: 1,
		} {
			if got := metricValue(t, mgr.Registry(), series); got != want {
				t.Errorf("%s: got %v, want %v", series, got, want)
			}
		}
	})
}

// TestRequeueJitter checks that requeues come at RequeueAfter at the
// earliest, within the jitter's fraction at the latest, and spread.
func TestRequeueJitter(t *testing.T) {
	const n, after, fraction = 50, 10 * time.Second, 0.5
	synctest.Test(t, func(t *testing.T) {
		var objs []*corev1.ConfigMap
		for i := range n {
			objs = append(objs, configMap("ns", strings.Repeat("x", i+1)))
		}
		cs := fake.NewClientset()
		for _, o := range objs {
			must(t, cs.Tracker().Add(o))
		}
		mgr := newManager(t, ctrl.Options{FakeClientset: cs})
		var mu sync.Mutex
		first, second := map[string]time.Time{}, map[string]time.Time{}
		_, err := ctrl.NewController(mgr, "jitter", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := first[cm.Name]; !ok {
				first[cm.Name] = time.Now()
				return ctrl.Result{RequeueAfter: after}, nil
			}
			second[cm.Name] = time.Now()
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{Workers: 4, RequeueJitter: fraction})
		must(t, err)
		ctx := start(t, mgr)
		must(t, mgr.WaitIdle(ctx, time.Hour))
		mu.Lock()
		defer mu.Unlock()
		delays := map[time.Duration]bool{}
		for name, at := range second {
			d := at.Sub(first[name])
			if d < after || d > time.Duration(float64(after)*(1+fraction)) {
				t.Errorf("%s requeued after %s, want within [%s, %s]", name, d, after, time.Duration(float64(after)*(1+fraction)))
			}
			delays[d] = true
		}
		if len(second) != n || len(delays) < n/2 {
			t.Errorf("got %d requeues at %d distinct delays, want %d spread over at least %d", len(second), len(delays), n, n/2)
		}
	})
}

// TestSetCondition checks observedGeneration and meta.SetStatusCondition's
// transition times.
func TestSetCondition(t *testing.T) {
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	var conds []metav1.Condition
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if !ctrl.SetCondition(&conds, w, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending", LastTransitionTime: then}) {
		t.Error("first SetCondition: got no change")
	}
	w.Generation = 2
	if !ctrl.SetCondition(&conds, w, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending"}) {
		t.Error("SetCondition for a new generation: got no change, want observedGeneration updated")
	}
	if got := conds[0]; got.ObservedGeneration != 2 || !got.LastTransitionTime.Equal(&then) {
		t.Errorf("same status, new generation: got generation %d at %s, want 2 at %s", got.ObservedGeneration, got.LastTransitionTime, then)
	}
	ctrl.SetCondition(&conds, w, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Done"})
	if got := conds[0]; got.LastTransitionTime.Equal(&then) || len(conds) != 1 {
		t.Errorf("new status: got %+v, want one condition with a new transition time", conds)
	}
}
