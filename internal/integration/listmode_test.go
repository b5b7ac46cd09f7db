package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestListMode: a cache streams its lists where the API server allows it,
// as every supported release does by default, and says so in
// ctrl_cache_list_mode. An API server whose WatchList feature is off (as
// 1.33's was by default, and as any cluster may set it) refuses a streamed
// list with 422 Invalid: the cache says so in one log line, lists in pages
// and reconciles as before, with no outage logged and no watch error.
func TestListMode(t *testing.T) {
	for _, tt := range []struct {
		name      string
		flags     []string
		mode      string
		refusals  int // log lines that say the server does not stream lists
		streaming float64
	}{
		{name: "streaming", mode: "streaming", streaming: 1},
		{name: "paged", flags: []string{"--feature-gates=WatchList=false"}, mode: "paged", refusals: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := env
			if tt.flags != nil {
				var err error
				e, err = ctrltest.New(ctrltest.Options{APIServerFlags: tt.flags})
				must(t, err)
				t.Cleanup(func() { must(t, e.Stop()) })
			}
			cs, err := kubernetes.NewForConfig(e.Config())
			must(t, err)
			ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}, metav1.CreateOptions{})
			must(t, err)
			const n = 20
			for i := range n / 2 { // listed
				_, err := cs.CoreV1().ConfigMaps(ns.Name).Create(context.Background(),
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{})
				must(t, err)
			}

			var log logLines
			var watchErrs []error
			var mu sync.Mutex
			mgr, err := ctrl.NewManager(ctrl.Options{Config: e.Config(), Namespace: ns.Name, Logger: log.logger()})
			must(t, err)
			seen := map[string]bool{}
			c, err := ctrl.NewController(mgr, "list-mode", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				mu.Lock()
				seen[cm.Name] = true
				mu.Unlock()
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{})
			must(t, err)
			c.Cache().SetWatchErrorHandler(func(err error) {
				mu.Lock()
				watchErrs = append(watchErrs, err)
				mu.Unlock()
			})
			client := newClient[*corev1.ConfigMap](t, mgr)
			start(t, mgr)
			waitIdle(t, mgr)
			for i := n / 2; i < n; i++ { // watched
				_, err := client.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("cm-%02d", i)}})
				must(t, err)
			}
			waitIdle(t, mgr)

			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n {
				t.Errorf("reconciled %d ConfigMaps, want %d", len(seen), n)
			}
			if len(watchErrs) > 0 {
				t.Errorf("the watch error handler got %v, want nothing", watchErrs)
			}
			labels := map[string]string{"resource": "configmaps", "namespace": ns.Name, "cluster": ""}
			streaming, paged := listMode(t, mgr, labels, "streaming"), listMode(t, mgr, labels, "paged")
			if streaming != tt.streaming || paged != 1-tt.streaming {
				t.Errorf("ctrl_cache_list_mode: streaming %v, paged %v; want the cache in mode %s", streaming, paged, tt.mode)
			}
			if got := log.count("the API server does not stream lists; listing in pages"); got != tt.refusals {
				t.Errorf("%d log lines say the server does not stream lists, want %d:\n%s", got, tt.refusals, &log)
			}
			if got := log.count("lost the watch") + log.count("cannot list or watch"); got != 0 {
				t.Errorf("%d log lines report an outage, want none:\n%s", got, &log)
			}
		})
	}
}

// listMode returns the value of ctrl_cache_list_mode's series for a
// cache's labels and a mode, or -1 if there is none.
func listMode(t *testing.T, mgr *ctrl.Manager, labels map[string]string, mode string) float64 {
	t.Helper()
	families, err := mgr.Registry().Gather()
	must(t, err)
	for _, mf := range families {
		if mf.GetName() != "ctrl_cache_list_mode" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) && matches(m, map[string]string{"mode": mode}) {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}
