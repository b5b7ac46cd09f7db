package production_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
)

// TestStandbyQueuesNothing runs a leader in a child process and a standby
// in this one, churns objects with generated names while the standby
// stands by, then kills the leader. The standby must keep its caches warm
// and queue nothing while it stands by (no queue growth, no tombstones:
// its queue takes no adds), and after the takeover it must reconcile every
// live object once and call OnDelete only for deletions made after it took
// over: the old leader handled the others.
func TestStandbyQueuesNothing(t *testing.T) {
	ns := namespace(t)
	cs := kubernetes.NewForConfigOrDie(env.Config())
	ctx := context.Background()
	createConfigMaps(t, ns, "live", 10)

	child, lines := startChild(t, ns, "standby")
	var childMu sync.Mutex
	childDeleted := map[string]bool{}
	childReconciled := make(chan struct{}, 1000)
	go func() {
		for lines.Scan() {
			line := lines.Text()
			if name, ok := strings.CutPrefix(line, "deleted "); ok {
				childMu.Lock()
				childDeleted[name] = true
				childMu.Unlock()
			} else if strings.HasPrefix(line, "reconciled ") {
				childReconciled <- struct{}{}
			}
		}
	}()
	for range 10 {
		select {
		case <-childReconciled:
		case <-time.After(30 * time.Second):
			t.Fatal("the child did not reconcile the live objects")
		}
	}
	if h := holder(t, ns, "standby"); h != "child" {
		t.Fatalf("got holder %q, want child", h)
	}

	reg := prometheus.NewRegistry()
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, Registerer: reg,
		LeaderElection: election("standby", "standby")})
	must(t, err)
	var (
		mu         sync.Mutex
		reconciled = map[string]int{}
		deleted    []string
		leading    bool
	)
	c, err := ctrl.NewController(mgr, "standby", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			t.Errorf("reconciled %s before taking over", cm.Name)
		}
		reconciled[cm.Name]++
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, cm.Name)
		return nil
	}))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	must(t, c.Cache().WaitForSync(syncCtx))

	// Churn while standing by: objects with generated names come and go.
	const churn = 100
	for range churn {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "churn-"}}, metav1.CreateOptions{})
		must(t, err)
		must(t, cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}))
	}
	eventually(t, 30*time.Second, "the leader handles every churned deletion", func() bool {
		childMu.Lock()
		defer childMu.Unlock()
		return len(childDeleted) == churn
	})
	eventually(t, 10*time.Second, "the standby's cache sees the churn settle", func() bool {
		return len(c.Cache().List(ns, nil)) == 10
	})
	for _, series := range []string{
		`workqueue_adds_total{controller="standby",name="standby"}`,
		`workqueue_depth{controller="standby",name="standby"}`,
	} {
		if got := gauge(t, reg, series); got != 0 {
			t.Errorf("standing by: %s = %v, want 0", series, got)
		}
	}

	must(t, child.Process.Kill()) // SIGKILL: the Lease is not released
	mu.Lock()
	leading = true // from here on the standby may take over at any moment
	mu.Unlock()
	eventually(t, 3*time.Second+10*time.Second, "the standby leads", func() bool { return holder(t, ns, "standby") == "standby" })
	waitCtx, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	must(t, mgr.WaitIdle(waitCtx, time.Minute))

	// After the takeover, deletions are the new leader's.
	for i := range 3 {
		must(t, cs.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("live-%d", i), metav1.DeleteOptions{}))
	}
	eventually(t, 10*time.Second, "OnDelete sees the deletions after the takeover", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deleted) >= 3
	})
	must(t, mgr.WaitIdle(waitCtx, time.Minute))

	mu.Lock()
	defer mu.Unlock()
	slices.Sort(deleted)
	if want := []string{"live-0", "live-1", "live-2"}; !slices.Equal(deleted, want) {
		t.Errorf("OnDelete after the takeover: got %q, want %q (never the %d churned objects the old leader handled)", deleted, want, churn)
	}
	want := map[string]int{}
	for i := range 10 {
		want[fmt.Sprintf("live-%d", i)] = 1
	}
	if !maps.Equal(reconciled, want) {
		t.Errorf("reconciles after the takeover: got %v, want each live object once", reconciled)
	}
}

// gauge reads one series of a registry: a counter's or a gauge's value.
func gauge(t *testing.T, reg *prometheus.Registry, series string) float64 {
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
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
