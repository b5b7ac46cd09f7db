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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestRelistAfterCompaction cuts a controller off the API server, changes
// its ConfigMaps behind its back, and lets etcd compact away the history
// its watch would resume from. When the partition heals, the watch cannot
// resume (410 Gone): the cache must relist, and the controller must see
// every change, the deletion included.
//
// It runs a control plane of its own: etcd is compacted every second, and
// ConfigMaps have no watch cache, so a watch goes to etcd and fails as soon
// as its resourceVersion is compacted. A partition (see partition), not a
// stopped API server, cuts the controller off: the test's own writes must
// still get through.
func TestRelistAfterCompaction(t *testing.T) {
	env2 := ctrltest.Start(t, ctrltest.Options{APIServerFlags: []string{ // stopped after the manager's cleanup
		"--etcd-compaction-interval=1s",
		"--watch-cache-sizes=configmaps#0",
	}})
	cs, err := kubernetes.NewForConfig(env2.Config())
	must(t, err)
	ctx := context.Background()
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}, metav1.CreateOptions{})
	must(t, err)
	ns := nsObj.Name

	p := &partition{}
	cfg := env2.Config()
	cfg.Wrap(p.wrap)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var (
		mu          sync.Mutex
		deleted     []string
		watchErrors []error
	)
	// The controller copies data.v into the annotation observed-v.
	c, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["observed-v"] == cm.Data["v"] {
			return ctrl.Result{}, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"observed-v":%q}}}`, cm.Data["v"])
		_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnDelete(func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, cm.Name+":"+cm.Data["v"])
		return nil
	}))
	c.Cache().SetWatchErrorHandler(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		watchErrors = append(watchErrors, err)
	})
	start(t, mgr)
	waitIdle(t, mgr) // synced and watching

	write := func(name, v string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v}}
		_, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		}
		must(t, err)
	}
	mirrored := func(want map[string]string) error {
		list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, cm := range list.Items {
			got[cm.Name] = cm.Data["v"] + "/" + cm.Annotations["observed-v"]
		}
		wantS := map[string]string{}
		for name, v := range want {
			wantS[name] = v + "/" + v
		}
		if fmt.Sprint(got) != fmt.Sprint(wantS) {
			return fmt.Errorf("ConfigMaps as v/observed-v: got %v, want %v", got, wantS)
		}
		return nil
	}

	// The watch carries these events, so the controller's watch
	// resumes from the resourceVersion of the last of them.
	write("a", "1")
	write("b", "1")
	eventually(t, 30*time.Second, func() error { return mirrored(map[string]string{"a": "1", "b": "1"}) })

	p.setCut(true)
	write("a", "2")
	must(t, cs.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}))
	write("c", "1")
	// Everything the controller has seen is older than now; wait until
	// etcd has compacted it away.
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	compacted := eventually(t, 30*time.Second, func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{
			ResourceVersion:      list.ResourceVersion,
			ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		return fmt.Errorf("list at resourceVersion %s: got %v, want 410 Gone once etcd compacted it", list.ResourceVersion, err)
	})
	p.setCut(false)
	began := time.Now()

	eventually(t, time.Minute, func() error {
		if err := mirrored(map[string]string{"a": "2", "c": "1"}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(deleted, []string{"b:1"}) {
			return fmt.Errorf("OnDelete: got %v, want [b:1]", deleted)
		}
		return nil
	})
	converged := time.Since(began)
	expired, requests := p.log()
	t.Logf("etcd compacted %s into the partition; converged %s after it healed", compacted.Round(time.Millisecond), converged.Round(time.Millisecond))
	t.Logf("requests after the partition healed: %v", requests)
	t.Logf("watches answered 410 Gone: %v", expired)

	t.Run("relist counted", func(t *testing.T) {
		if len(expired) == 0 {
			t.Log("no watch was answered 410 Gone: the cache relisted without trying to resume")
			return
		}
		// A 410 Gone is not a watch error (see Cache.SetWatchErrorHandler): the cache
		// relists and counts it.
		mfs, err := mgr.Registry().Gather()
		must(t, err)
		var relists float64
		for _, mf := range mfs {
			if mf.GetName() == "ctrl_cache_relists_total" {
				for _, m := range mf.GetMetric() {
					relists += m.GetCounter().GetValue()
				}
			}
		}
		if relists < 1 {
			t.Errorf("ctrl_cache_relists_total: got %v, want at least 1 after a 410 Gone", relists)
		}
	})
}

// TestRelistLiveFirst changes every object of a controller behind its back
// until its watch cannot resume, so that it relists and finds them all
// updated, and checks that a change made while the controller works
// through the relist is reconciled before the rest of it: the relist's
// updates wait in the backlog, not in the queue.
func TestRelistLiveFirst(t *testing.T) {
	env3, err := ctrltest.New(ctrltest.Options{APIServerFlags: []string{
		"--etcd-compaction-interval=1s",
		"--watch-cache-sizes=configmaps#0",
	}})
	must(t, err)
	t.Cleanup(func() { must(t, env3.Stop()) })
	cs, err := kubernetes.NewForConfig(env3.Config())
	must(t, err)
	ctx := context.Background()
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}, metav1.CreateOptions{})
	must(t, err)
	ns := nsObj.Name
	const n = 300
	for i := range n {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}}, metav1.CreateOptions{})
		must(t, err)
	}

	p := &partition{}
	cfg := env3.Config()
	cfg.Wrap(p.wrap)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	var (
		mu      sync.Mutex
		after   bool // the partition healed
		order   []string
		reasons = map[ctrl.Trigger]int{}
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	c, err := ctrl.NewController(mgr, "relist", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		if !after {
			mu.Unlock()
			return ctrl.Result{}, nil
		}
		order = append(order, cm.Name)
		for _, c := range ctrl.RequestFrom(ctx).Causes.First {
			reasons[c.Trigger]++
		}
		first := len(order) == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: 1})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	p.setCut(true)
	var last string
	for i := range n {
		cm, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"v": "2"}}, metav1.UpdateOptions{})
		must(t, err)
		last = cm.ResourceVersion
	}
	eventually(t, 30*time.Second, func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ResourceVersion: last, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		return fmt.Errorf("list at resourceVersion %s: got %v, want 410 Gone once etcd compacted it", last, err)
	})
	// Changes the watch delivered before the cut are reconciled before
	// the relist: the idle check needs no server.
	waitIdle(t, mgr)
	mu.Lock()
	after = true
	mu.Unlock()
	p.setCut(false)
	select {
	case <-entered: // the relist is in: its first key is being reconciled
	case <-time.After(time.Minute):
		t.Fatal("no reconcile after the partition healed")
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "live"}}, metav1.CreateOptions{})
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		if _, ok := c.Cache().Get(ctrl.Key{Namespace: ns, Name: "live"}); !ok {
			return errors.New("live not in the cache yet")
		}
		return nil
	})
	close(release)
	waitIdle(t, mgr)

	mu.Lock()
	defer mu.Unlock()
	pos := slices.Index(order, "live")
	t.Logf("the live change was reconciled at position %d of %d after the relist; causes: %v", pos, len(order), reasons)
	if pos < 0 || pos > 130 {
		t.Errorf("the change made during the relist was reconciled at position %d of %d, want within the first 130", pos, len(order))
	}
	if len(order) != n+1 {
		t.Errorf("%d reconciles after the relist, want %d: each updated object once, and the live one", len(order), n+1)
	}
}
