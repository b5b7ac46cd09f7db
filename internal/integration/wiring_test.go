package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl"
)

// Trinket and Cog are custom resources whose CRDs the wiring tests
// install and delete while managers run: Trinkets as an optional kind,
// Cogs as a required one. No other test uses them.
type Trinket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (g *Trinket) DeepCopyObject() kruntime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

type Cog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (s *Cog) DeepCopyObject() kruntime.Object {
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	for _, err := range []error{
		ctrl.Register[*Trinket](ctrl.APIResource{Group: "wiring.example.com", Version: "v1", Resource: "trinkets", Namespaced: true}),
		ctrl.Register[*Cog](ctrl.APIResource{Group: "wiring.example.com", Version: "v1", Resource: "cogs", Namespaced: true}),
	} {
		if err != nil {
			panic(err)
		}
	}
}

// wiringCRD is the CRD of plural.wiring.example.com, kind kind.
func wiringCRD(plural, kind string) *unstructured.Unstructured {
	manifest := fmt.Sprintf(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[1]s.wiring.example.com
spec:
  group: wiring.example.com
  scope: Namespaced
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[1]s, singular: %[3]s}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, plural, kind, strings.ToLower(kind))
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &crd.Object); err != nil {
		panic(err)
	}
	return crd
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crds is the test's own client of CRDs.
func crds(t *testing.T) dynamic.ResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	must(t, err)
	return dyn.Resource(crdGVR)
}

// createCRD creates crd and returns when the test first sees it
// Established, polling every 10 ms.
func createCRD(t *testing.T, crd *unstructured.Unstructured) time.Time {
	t.Helper()
	ctx := context.Background()
	_, err := crds(t).Create(ctx, crd, metav1.CreateOptions{})
	must(t, err)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) { // polling the server
		got, err := crds(t).Get(ctx, crd.GetName(), metav1.GetOptions{})
		must(t, err)
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, _ := c.(map[string]any); c["type"] == "Established" && c["status"] == "True" {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not Established after a minute", crd.GetName())
		}
	}
}

// deleteCRD deletes the CRD name and waits until it is gone: after the API
// server has deleted every object of it.
func deleteCRD(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	err := crds(t).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	must(t, err)
	eventually(t, 2*time.Minute, func() error {
		_, err := crds(t).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("CRD %s still there (%v)", name, err)
	})
}

// requests counts the requests of a manager to one resource's path.
type requests struct {
	path string
	mu   sync.Mutex
	at   []time.Time
}

func (r *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, r.path) {
			r.mu.Lock()
			r.at = append(r.at, time.Now())
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// since returns the times of the requests made after t.
func (r *requests) since(t time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.at, t, func(a, b time.Time) int { return a.Compare(b) })
	return slices.Clone(r.at[i:])
}

// logs keeps the lines a manager logs.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) add(prefix, args string) {
	l.mu.Lock()
	l.lines = append(l.lines, prefix+" "+args)
	l.mu.Unlock()
}

// matching returns the lines logged from index from on that contain every
// one of subs, and the index of the next line.
func (l *logs) matching(from int, subs ...string) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines[min(from, len(l.lines)):] {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out, len(l.lines)
}

// Bounds of TestOptionalCRD. A cache lists within listWithin of the API
// server serving its resource (the test's own list succeeding, polled
// every 10 ms). The CRD's watch event takes milliseconds; a list that
// finds the server not serving yet (404: a second, measured, after a CRD
// is created again, while the server sets up its handler) is retried at
// watcher.Settling's pace, at most 0.1 s * 1.2^k * 1.5 apart: under 0.65 s
// in the first 2.5 s. That leaves 1.35 s for two CPU-bound processes
// beside the suite. An object is reconciled within reconcileWithin of its
// create's return: one watch event and one reconcile, milliseconds on a
// quiet machine; the rest is margin for the loaded one.
const (
	listWithin      = 2 * time.Second
	reconcileWithin = 2 * time.Second
)

// TestOptionalCRD runs a controller of an optional kind, Trinket, through
// its CRD's life on the real API server: absent at Start, installed,
// deleted with objects that carry the controller's finalizer, installed
// again.
//
// The promises: Start does not wait for the CRD; /readyz stays ready and
// names the CRD while the kind waits, and so does ctrl_cache_waiting_for_crd;
// the cache lists within listWithin of the CRD becoming Established; when
// the CRD is deleted, the API server deletes its objects, the controller
// finalizes each once (the server waits for that) and OnDelete sees each
// once; then the cache says once that it waits, makes no request to the
// resource while it does (no relist loop), and no reconcile fails.
func TestOptionalCRD(t *testing.T) {
	ns := newNamespace(t)
	crd := wiringCRD("trinkets", "Trinket")
	deleteCRD(t, crd.GetName()) // in case a failed run left it
	trinketPath := "/apis/wiring.example.com/v1/namespaces/" + ns + "/trinkets"
	reqs := &requests{path: trinketPath}
	cfg := env.Config()
	cfg.Wrap(reqs.wrap)
	var log logs
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, HealthAddress: "127.0.0.1:0",
		Logger: funcr.New(log.add, funcr.Options{})})
	must(t, err)
	var mu sync.Mutex
	reconciled, finalized, deleted := map[string]time.Time{}, map[string]int{}, map[string]int{}
	c, err := ctrl.NewController(mgr, "trinkets", func(ctx context.Context, g *Trinket) (ctrl.Result, error) {
		mu.Lock()
		if _, ok := reconciled[g.Name]; !ok {
			reconciled[g.Name] = time.Now()
		}
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Optional: true}})
	must(t, err)
	must(t, c.OnFinalize("wiring.example.com/cleanup", func(_ context.Context, g *Trinket) error {
		mu.Lock()
		finalized[g.Name]++
		mu.Unlock()
		return nil
	}))
	must(t, c.OnDelete(func(_ context.Context, g *Trinket) error {
		mu.Lock()
		deleted[g.Name]++
		mu.Unlock()
		return nil
	}))
	trinkets := newClient[*Trinket](t, mgr)
	began := time.Now()
	ctx := start(t, mgr)
	t.Cleanup(func() { deleteCRD(t, crd.GetName()) }) // before the manager stops: it finalizes
	waitIdle(t, mgr)
	t.Logf("started and idle in %s without the CRD", time.Since(began).Round(time.Millisecond))

	waiting := `ctrl_cache_waiting_for_crd{resource="trinkets.wiring.example.com"}`
	connected := fmt.Sprintf(`ctrl_cache_watch_connected{cluster="",namespace=%q,resource="trinkets.wiring.example.com"}`, ns)
	checkWaiting := func(step, reason string) {
		t.Helper()
		code, body := readyz(t, mgr)
		want := "waiting for CustomResourceDefinition trinkets.wiring.example.com (" + reason + "): " + c.Cache().String() + `, for controllers "trinkets"`
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: /readyz: got %d %q, want 200 saying %q", step, code, body, want)
		}
		if got := metric(t, mgr, waiting); got != 1 {
			t.Errorf("%s: %s: got %v, want 1", step, waiting, got)
		}
		if c.Cache().Served() {
			t.Errorf("%s: Served: got true, want false", step)
		}
	}
	checkWaiting("before the CRD", "not installed")
	if lines, _ := log.matching(0, "waiting for the CustomResourceDefinition", "trinkets.wiring.example.com"); len(lines) != 1 {
		t.Errorf("lines saying the kind waits: got %q, want 1", lines)
	}

	// install creates the CRD and, at once, a Trinket, which the server
	// accepts 2 s after the CRD became Established; it checks both bounds.
	dyn, err := dynamic.NewForConfig(env.Config())
	must(t, err)
	own := dyn.Resource(schema.GroupVersionResource{Group: "wiring.example.com", Version: "v1", Resource: "trinkets"}).Namespace(ns)
	install := func(step, name string) {
		t.Helper()
		established := createCRD(t, crd)
		served, created := make(chan time.Time, 1), make(chan time.Time, 1)
		go func() {
			for time.Since(established) < time.Minute {
				if _, err := own.List(ctx, metav1.ListOptions{}); err == nil {
					served <- time.Now()
					return
				}
				time.Sleep(10 * time.Millisecond) // polling the server
			}
			served <- time.Time{}
		}()
		go func() {
			for time.Since(established) < time.Minute {
				_, err := trinkets.Uncached().Create(ctx, &Trinket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
				if err == nil {
					created <- time.Now()
					return
				}
				time.Sleep(25 * time.Millisecond) // retrying the server
			}
			created <- time.Time{}
		}()
		var listedAt time.Time
		eventually(t, time.Minute, func() error {
			if metric(t, mgr, connected) != 1 {
				return fmt.Errorf("%s: the cache has not listed", step)
			}
			listedAt = time.Now()
			return nil
		})
		servedAt, createdAt := <-served, <-created
		if servedAt.IsZero() || createdAt.IsZero() {
			t.Fatalf("%s: the server did not serve trinkets within a minute", step)
		}
		eventually(t, time.Minute, func() error {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := reconciled[name]; !ok {
				return fmt.Errorf("%s not reconciled", name)
			}
			return nil
		})
		mu.Lock()
		took := reconciled[name].Sub(createdAt)
		mu.Unlock()
		listed := listedAt.Sub(servedAt)
		t.Logf("%s: served %s after the CRD was Established, listed %s after that; %s created %s after Established (the server holds creates 2 s), reconciled %s after its create returned",
			step, servedAt.Sub(established).Round(time.Millisecond), listed.Round(time.Millisecond), name,
			createdAt.Sub(established).Round(time.Millisecond), took.Round(time.Millisecond))
		if listed > listWithin {
			t.Errorf("%s: the cache listed %s after the server served the resource, want within %s", step, listed, listWithin)
		}
		if took > reconcileWithin {
			t.Errorf("%s: %s reconciled %s after its create returned, want within %s", step, name, took, reconcileWithin)
		}
		waitIdle(t, mgr)
	}
	install("installed", "a")
	for _, name := range []string{"b", "c"} {
		_, err := trinkets.Create(ctx, &Trinket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		must(t, err)
	}
	waitIdle(t, mgr)
	if code, body := readyz(t, mgr); code != http.StatusOK || strings.Contains(body, "waiting for") {
		t.Errorf("installed: /readyz: got %d %q, want 200 without a waiting kind", code, body)
	}
	if got := metric(t, mgr, waiting); got != 0 {
		t.Errorf("installed: %s: got %v, want 0", waiting, got)
	}

	// Deleted: the server deletes the Trinkets, which wait for the
	// controller's finalizer, then the CRD.
	_, mark := log.matching(0)
	errorsBefore := metric(t, mgr, `controller_runtime_reconcile_errors_total{controller="trinkets"}`)
	deleteCRD(t, crd.GetName())
	gone := time.Now()
	eventually(t, 10*time.Second, func() error {
		if !c.Cache().Served() {
			return nil
		}
		return fmt.Errorf("the cache still says its kind is served")
	})
	waitIdle(t, mgr)
	waitedAt := time.Now()
	checkWaiting("deleted", "deleted")
	mu.Lock()
	for _, name := range []string{"a", "b", "c"} {
		if finalized[name] != 1 || deleted[name] != 1 {
			t.Errorf("%s: finalized %d times, OnDelete %d times; want once each", name, finalized[name], deleted[name])
		}
	}
	mu.Unlock()
	// A window as long as the one in which a cache without a CRD watch
	// relisted about 17 times.
	const window = 20 * time.Second
	time.Sleep(window) // measuring what the manager does meanwhile: nothing
	if got := reqs.since(waitedAt); len(got) != 0 {
		t.Errorf("requests to %s in the %s after the cache said it waits: got %d, want none", trinketPath, window, len(got))
	}
	t.Logf("requests to the resource from the CRD's deletion to the end of the window: %d", len(reqs.since(gone)))
	if got := metric(t, mgr, `controller_runtime_reconcile_errors_total{controller="trinkets"}`); got != errorsBefore {
		t.Errorf("reconcile errors while the CRD went: got %v more, want none", got-errorsBefore)
	}
	lines, _ := log.matching(mark, "trinkets")
	if len(lines) != 1 || !strings.Contains(lines[0], `"msg"="waiting for the CustomResourceDefinition"`) ||
		!strings.Contains(lines[0], `"reason"="deleted"`) {
		t.Errorf("lines about trinkets once the CRD was deleted: got\n%s\nwant one saying the kind waits, deleted", strings.Join(lines, "\n"))
	}

	// Installed again: the controller reconciles again.
	install("installed again", "d")
}

// TestRequiredCRDDeleted deletes the CRD of a required kind while the
// manager runs. The manager keeps running; its cache says once that it lost
// the resource, naming the CRD; /readyz says it is not ready, naming the
// CRD; its lists back off (watcher.NotServed) instead of coming every
// second; it comes back when the CRD returns. And a manager started
// without the CRD fails at once, as required kinds do.
func TestRequiredCRDDeleted(t *testing.T) {
	ns := newNamespace(t)
	crd := wiringCRD("cogs", "Cog")
	deleteCRD(t, crd.GetName())

	mgr := newManager(t, ns)
	_, err := ctrl.NewController(mgr, "cogs", func(context.Context, *Cog) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	must(t, err)
	began := time.Now()
	err = mgr.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition cogs.wiring.example.com is missing") {
		t.Errorf("Start without the CRD: got %v, want an error naming the CRD", err)
	}
	t.Logf("Start without the CRD failed after %s", time.Since(began).Round(time.Millisecond))

	createCRD(t, crd)
	t.Cleanup(func() { deleteCRD(t, crd.GetName()) })
	path := "/apis/wiring.example.com/v1/namespaces/" + ns + "/cogs"
	reqs := &requests{path: path}
	cfg := env.Config()
	cfg.Wrap(reqs.wrap)
	var log logs
	mgr, err = ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, HealthAddress: "127.0.0.1:0",
		Logger: funcr.New(log.add, funcr.Options{})})
	must(t, err)
	var mu sync.Mutex
	reconciled := map[string]bool{}
	_, err = ctrl.NewController(mgr, "cogs", func(_ context.Context, s *Cog) (ctrl.Result, error) {
		mu.Lock()
		reconciled[s.Name] = true
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	cogs := newClient[*Cog](t, mgr)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	deleteCRD(t, crd.GetName())
	gone := time.Now()
	// NotServed's delays are at least 0.1, 0.2, 0.4, ... s: in 20 s a
	// cache tries at most 8 times (at 0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 and
	// 12.7 s), where it tried about 17 times before it backed off. Each
	// try asks twice: for a streaming list, then for a list (client-go's
	// fallback), each after a probe of one object (an outage's), which
	// is what fails.
	const window, most = 20 * time.Second, 2 * 8
	time.Sleep(window) // measuring what the manager does meanwhile
	got := reqs.since(gone)
	var gaps []string
	for i := 1; i < len(got); i++ {
		gaps = append(gaps, got[i].Sub(got[i-1]).Round(time.Millisecond).String())
	}
	t.Logf("requests to the resource in the %s after the CRD was deleted: %d, apart by %s", window, len(got), strings.Join(gaps, ", "))
	// Each cycle is one list; the first may be the watch that ended.
	if len(got) > most+1 {
		t.Errorf("requests in the %s after the CRD was deleted: got %d, want at most %d", window, len(got), most+1)
	}
	code, body := readyz(t, mgr)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "CustomResourceDefinition cogs.wiring.example.com is missing") {
		t.Errorf("/readyz: got %d %q, want 503 naming the CRD", code, body)
	}
	if lines, _ := log.matching(0, "cogs.wiring.example.com is missing"); len(lines) != 1 {
		t.Errorf("lines naming the CRD: got\n%s\nwant 1", strings.Join(lines, "\n"))
	}

	// Back: the cache relists at its next attempt, at most NotServed's
	// cap and jitter (30 s) after the last.
	createCRD(t, crd)
	back := time.Now()
	eventually(t, time.Minute, func() error {
		_, err := cogs.Uncached().Create(ctx, &Cog{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after"}})
		return err
	})
	eventually(t, 35*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !reconciled["after"] {
			return fmt.Errorf("not reconciled")
		}
		return nil
	})
	t.Logf("reconciled %s after the CRD came back", (time.Since(back)).Round(time.Millisecond))
	if code, _ := readyz(t, mgr); code != http.StatusOK {
		t.Errorf("/readyz once the CRD is back: got %d, want 200", code)
	}
}

// pollGoroutines returns the counts of goroutines with frames once they
// are want, or after 10 s.
func pollGoroutines(frames []string, want map[string]int) (got, _ map[string]int) {
	got = goroutines(frames...)
	for deadline := time.Now().Add(10 * time.Second); !sameCounts(got, want) && time.Now().Before(deadline); got = goroutines(frames...) {
		time.Sleep(10 * time.Millisecond) // polling the runtime's goroutines
	}
	return got, want
}

// goroutines counts the goroutines whose stacks hold each of frames.
func goroutines(frames ...string) map[string]int {
	out := map[string]int{}
	for _, g := range strings.Split(stacks(), "\n\n") {
		for _, f := range frames {
			if strings.Contains(g, f) {
				out[f]++
			}
		}
	}
	return out
}

// TestControllerStop stops one of two controllers while the manager runs
// on the real API server: its workers, queue, resync loop and the watches
// of the caches only it used end, and the other controller goes on. The
// manager's own cleanup then checks that nothing at all leaked.
func TestControllerStop(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(name string) {
		mu.Lock()
		calls[name]++
		mu.Unlock()
	}
	_, err := ctrl.NewController(mgr, "configmaps", func(_ context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		count("cm/" + cm.Name)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	widgets, err := ctrl.NewController(mgr, "widgets", func(_ context.Context, w *Widget) (ctrl.Result, error) {
		count("widget/" + w.Name)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 4, ResyncPeriod: time.Hour})
	must(t, err)
	_, err = ctrl.Owns[*corev1.Secret](widgets)
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	widgetClient := newClient[*Widget](t, mgr)
	ctx := start(t, mgr)
	_, err = widgetClient.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w1"}})
	must(t, err)
	waitIdle(t, mgr)

	frames := []string{").work(", ").resync(", ").waitingLoop(", "internal/watcher.Run("}
	// Goroutines run their first line when the scheduler gets to them, and
	// client-go's delaying queue ends its loop after the queue's shutdown,
	// which Stop does not wait for: poll, before and after.
	if got, want := pollGoroutines(frames, map[string]int{frames[0]: 5, frames[1]: 1, frames[2]: 2, frames[3]: 3}); !sameCounts(got, want) {
		t.Fatalf("before Stop: got goroutines %v, want %v", got, want)
	}
	must(t, widgets.Stop(ctx))
	if got, want := pollGoroutines(frames, map[string]int{frames[0]: 1, frames[1]: 0, frames[2]: 1, frames[3]: 1}); !sameCounts(got, want) {
		t.Errorf("after Stop: got goroutines %v, want %v", got, want)
	}
	_, err = widgetClient.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w2"}})
	must(t, err)
	_, err = configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})
	must(t, err)
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	if calls["widget/w1"] != 1 || calls["widget/w2"] != 0 || calls["cm/c1"] != 1 {
		t.Errorf("reconciles: got %v, want widget/w1 once before Stop, none of w2, cm/c1 once", calls)
	}
}

func sameCounts(got, want map[string]int) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestNamespacesAtRunTime adds a namespace to a running controller's cache,
// and removes one: the added namespace's objects are reconciled, with
// their children read through the Owns cache that followed; the removed
// one's are forgotten: no OnDelete, no finalize, the finalizer stays, and
// later changes there reconcile nothing.
func TestNamespacesAtRunTime(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	secrets := newClient[*corev1.Secret](t, mgr)
	var mu sync.Mutex
	reconciled, hooks := map[string]int{}, map[string]int{}
	var readErrs []error
	c, err := ctrl.NewController(mgr, "namespaces", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if _, err := secrets.List(ctx, ctrl.ListParams{Namespace: cm.Namespace}); err != nil {
			mu.Lock()
			readErrs = append(readErrs, err)
			mu.Unlock()
		}
		mu.Lock()
		reconciled[ctrl.KeyOf(cm).String()]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{nsA}}})
	must(t, err)
	_, err = ctrl.Owns[*corev1.Secret](c)
	must(t, err)
	must(t, c.OnFinalize("wiring.example.com/cleanup", func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		hooks["finalize "+ctrl.KeyOf(cm).String()]++
		mu.Unlock()
		return nil
	}))
	must(t, c.OnDelete(func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		hooks["delete "+ctrl.KeyOf(cm).String()]++
		mu.Unlock()
		return nil
	}))
	ctx := start(t, mgr)
	for _, ns := range []string{nsA, nsB} {
		_, err := configMaps.Uncached().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}})
		must(t, err)
	}
	eventually(t, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if reconciled[nsA+"/cm"] == 0 {
			return fmt.Errorf("%s/cm not reconciled", nsA)
		}
		return nil
	})
	waitIdle(t, mgr)

	must(t, c.Cache().SetNamespaces(nsA, nsB))
	waitIdle(t, mgr)
	must(t, c.Cache().SetNamespaces(nsB))
	waitIdle(t, mgr)
	// A change in the removed namespace reaches nobody.
	cm, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: nsA, Name: "cm"})
	must(t, err)
	cm.Data = map[string]string{"after": "removal"}
	_, err = configMaps.Uncached().Update(ctx, cm)
	must(t, err)
	// And one in the kept namespace is reconciled, after which the
	// removed namespace's change has had its chance to arrive.
	cm, err = configMaps.Get(ctx, ctrl.Key{Namespace: nsB, Name: "cm"})
	must(t, err)
	cm.Data = map[string]string{"after": "removal"}
	_, err = configMaps.Update(ctx, cm)
	must(t, err)
	waitIdle(t, mgr)

	mu.Lock()
	defer mu.Unlock()
	if len(hooks) != 0 || len(readErrs) != 0 {
		t.Errorf("hooks: got %v, want none; reads of Secrets: got errors %v, want none", hooks, readErrs)
	}
	// Each: the first reconcile adds the finalizer, whose update is
	// reconciled again; nsB's update once more.
	if want := map[string]int{nsA + "/cm": 2, nsB + "/cm": 3}; reconciled[nsA+"/cm"] != want[nsA+"/cm"] || reconciled[nsB+"/cm"] != want[nsB+"/cm"] {
		t.Errorf("reconciles: got %v, want %v", reconciled, want)
	}
	a, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: nsA, Name: "cm"})
	must(t, err)
	if !slices.Contains(a.Finalizers, "wiring.example.com/cleanup") {
		t.Errorf("%s/cm: got finalizers %q, want the controller's kept", nsA, a.Finalizers)
	}
	// Tidy: the forgotten object's finalizer would hold its namespace.
	a.Finalizers = nil
	_, err = configMaps.Uncached().Update(ctx, a)
	must(t, err)
}

// TestWidenedNamespacesResume widens a running cache from two namespaces
// to all: the feed that takes over the two's objects starts its list where
// the newest of their feeds was, or with a consistent read (never from
// "0", which a lagging watch cache may serve older than what the cache
// holds), so the objects it held are not reconciled again, and those of
// the third namespace are, once.
func TestWidenedNamespacesResume(t *testing.T) {
	nsA, nsB, nsC := newNamespace(t), newNamespace(t), newNamespace(t)
	var mu sync.Mutex
	var lists []url.Values // the initial lists of every namespace, as watches or lists (not probes, limit=1)
	cfg := rest.CopyConfig(env.Config())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			q := req.URL.Query()
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/configmaps" && q.Get("limit") != "1" && (q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true") {
				mu.Lock()
				lists = append(lists, q)
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	reconciled := map[string]int{}
	c, err := ctrl.NewController(mgr, "widen", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		reconciled[ctrl.KeyOf(cm).String()]++
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{nsA, nsB}}})
	must(t, err)
	ctx := start(t, mgr)
	var last string
	for _, ns := range []string{nsA, nsB, nsC} {
		cm, err := configMaps.Uncached().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}})
		must(t, err)
		if ns != nsC {
			last = cm.ResourceVersion
		}
	}
	waitIdle(t, mgr)

	must(t, c.Cache().SetNamespaces())
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{nsA + "/cm": 1, nsB + "/cm": 1, nsC + "/cm": 1}; !sameCounts(reconciled, want) {
		t.Errorf("reconciles: got %v, want %v: those cached before the widening once, the new namespace's once", reconciled, want)
	}
	if len(lists) != 1 {
		t.Fatalf("lists of all namespaces: %v, want one", lists)
	}
	q := lists[0]
	switch rv := q.Get("resourceVersion"); {
	case rv == "0":
		t.Errorf("the widened feed listed from \"0\" (%v), which may be older than what the cache holds", q)
	case rv != "" && (len(rv) < len(last) || len(rv) == len(last) && rv < last):
		t.Errorf("the widened feed listed from %s, older than %s, which the cache holds", rv, last)
	case rv != "" && q.Get("resourceVersionMatch") != "NotOlderThan":
		t.Errorf("the widened feed listed from %s with resourceVersionMatch %q, want NotOlderThan", rv, q.Get("resourceVersionMatch"))
	}
	t.Logf("the widened feed's list: %v; the newest object the cache held: %s", q, last)
}
