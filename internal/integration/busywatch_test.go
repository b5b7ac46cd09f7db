package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// TestBusyWatchOwnConnection deletes a thousand ConfigMaps at once under a
// controller whose watch was quiet: the burst moves the watch to an
// HTTP/1.1 connection of its own, and once the burst is over it moves back
// to the shared connection. Each move resumes where the watch was: every
// deletion reaches the cache, and nothing is listed again.
func TestBusyWatchOwnConnection(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	createConfigMaps(t, ns, 1000, 8, func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"v": "1"}}
	})

	mgr := newManager(t, ns)
	c := burstController(t, mgr, ns)
	start(t, mgr)
	waitIdle(t, mgr)
	watchesShared(t) // the initial list's connection is left once quiet
	relists := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"namespace": ns})

	// Sample the connections while the burst lasts.
	var sawOwn atomic.Bool
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if strings.Contains(stacks(), "net/http.(*persistConn).readLoop") {
				sawOwn.Store(true)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	must(t, clientset.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	eventually(t, time.Minute, func() error {
		if left := len(c.Cache().List("", nil)); left > 0 {
			return fmt.Errorf("%d ConfigMaps still cached", left)
		}
		return nil
	})
	close(stop)
	<-sampled
	if !sawOwn.Load() {
		t.Error("the watch stayed on the shared connection through a burst of 1000 deletions")
	}
	watchesShared(t)
	moves := func(conn string) float64 {
		return metricValue(t, mgr, "ctrl_cache_watch_moves_total", map[string]string{"namespace": ns, "connection": conn})
	}
	// The first list's move back, then the burst's move there and back.
	if own, shared := moves("own"), moves("shared"); own < 1 || shared != own+1 {
		t.Errorf("ctrl_cache_watch_moves_total: own %v, shared %v; want at least one move to its own connection, and one more back", own, shared)
	}
	if got := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"namespace": ns}); got != relists {
		t.Errorf("the cache listed again %v times: a move must resume the watch", got-relists)
	}
}

// TestDeadOwnConnectionNoticed cuts, silently, the connection of its own
// that a busy watch reads in the middle of a burst of deletions, and only
// that connection: the watch must leave it within the manager's
// ConnectionCheck (3 s) and resume on the shared connection, so that the
// cache sees every deletion, without listing again.
func TestDeadOwnConnectionNoticed(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	createConfigMaps(t, ns, 3000, 8, func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}}
	})
	b, newMgr := throughBlackhole(t)
	mgr := newMgr()
	c := burstController(t, mgr, ns)
	start(t, mgr)
	waitIdle(t, mgr)
	watchesShared(t)
	relists := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"namespace": ns})

	deleted := make(chan error, 1)
	go func() {
		deleted <- clientset.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}()
	eventually(t, time.Minute, func() error {
		if !strings.Contains(stacks(), "net/http.(*persistConn).readLoop") {
			return errors.New("the watch has no connection of its own yet")
		}
		return nil
	})
	silenced := b.silenceOwn()
	cut := time.Now()
	if silenced == 0 {
		t.Fatal("no connection of its own to cut: the proxy saw none that offered HTTP/1.1 only")
	}
	left := len(c.Cache().List("", nil))
	must(t, <-deleted)
	if left == 0 {
		t.Fatal("every deletion arrived before the watch's connection was cut: nothing was tested")
	}
	took := eventually(t, time.Minute, func() error {
		if n := len(c.Cache().List("", nil)); n > 0 {
			return fmt.Errorf("%d ConfigMaps still cached", n)
		}
		return nil
	})
	t.Logf("%d of 3000 deletions were still to come when %d connections were cut; all seen %s after", left, silenced, time.Since(cut).Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the cache saw every deletion %s after its watch's own connection went silent, want within 10s (ConnectionCheck 3 s)", took.Round(time.Millisecond))
	}
	if got := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"namespace": ns}); got != relists {
		t.Errorf("the cache listed again %v times: leaving a dead connection of its own must resume the watch", got-relists)
	}
}

// burstController is the ConfigMap controller of ns that the burst tests
// watch: it reconciles by doing nothing.
func burstController(t *testing.T, mgr *ctrl.Manager, ns string) *ctrl.Controller[*corev1.ConfigMap] {
	t.Helper()
	c, err := ctrl.NewController(mgr, "burst", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{ns}}})
	must(t, err)
	return c
}
