package bench_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/harness"
	"github.com/typedctrl/ctrl/bench/internal/rawctl"
)

// BenchmarkReconcile measures what one update of one object costs on the
// path from the watch to the reconcile function: reflector, store, event
// dispatch, work queue, cache read, reconcile. One op is one update, and
// every update is reconciled exactly once (reconciles/op shows it): the
// driver keeps at most one update per object in flight, over 64 objects, so
// the queue never coalesces. Every implementation runs 4 workers and the same
// reconcile body, which parses the object's round annotation and records it.
//
// Sources:
//   - event: updates are pushed straight into the watch that the informer
//     opened on the fake clientset, so nothing but the controller path runs.
//   - patch: updates are merge patches through the fake clientset, so each
//     also pays for the fake's object tracker (the same for everyone).
//
// Implementations:
//   - ctrl: ctrl.NewController; reconcile gets the cached object. In a test
//     binary ctrl checks every reconcile for a change to it: a copy and a
//     comparison each, which production samples (one in 64).
//   - ctrl-copy: ctrl with ControllerOptions.CopyObject, and no check.
//   - raw-strip: client-go informer (managedFields dropped), typed work queue,
//     lister Get, no copy: the floor, as in the end-to-end benchmark.
//   - raw-strip-copy: raw-strip plus a DeepCopy before reconcile, the
//     guarantee ctrl gives.
//   - bare (event only): a goroutine reading the watch channel and calling
//     reconcile directly: the cost of producing the update itself.
func BenchmarkReconcile(b *testing.B) {
	for _, source := range []string{"event", "patch"} {
		for _, impl := range []string{"ctrl", "ctrl-copy", "raw-strip", "raw-strip-copy", "bare"} {
			if impl == "bare" && source != "event" {
				continue
			}
			b.Run(source+"/"+impl, func(b *testing.B) { benchmarkReconcile(b, source, impl) })
		}
	}
}

const (
	microNamespace = "bench"
	microObjects   = 64
	microWorkers   = 4
)

// microData is every object's 1 KiB of data, shared: nobody modifies it.
var microData = map[string]string{"payload": string(make([]byte, 1024))}

func microObject(i, round, rv int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       microNamespace,
			Name:            harness.ObjectName(i),
			ResourceVersion: strconv.Itoa(rv),
			Annotations:     map[string]string{harness.RoundAnnotation: strconv.Itoa(round)},
		},
		Data: microData,
	}
}

// tracker records the highest round each object was reconciled at and wakes
// the driver after every reconcile.
type tracker struct {
	seen       []atomic.Int64
	reconciles atomic.Int64
	wake       chan struct{}
}

func newTracker(n int) *tracker {
	t := &tracker{seen: make([]atomic.Int64, n), wake: make(chan struct{}, 1)}
	for i := range t.seen {
		t.seen[i].Store(-1)
	}
	return t
}

// observe is the reconcile body of every implementation.
func (t *tracker) observe(cm *corev1.ConfigMap) {
	t.reconciles.Add(1)
	i := harness.ObjectIndex(cm.Name)
	if i < 0 || i >= len(t.seen) {
		return
	}
	g := int64(harness.Round(cm.Annotations))
	for {
		old := t.seen[i].Load()
		if g <= old || t.seen[i].CompareAndSwap(old, g) {
			break
		}
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// waitFor blocks until object i was reconciled at round g or later.
func (t *tracker) waitFor(b *testing.B, i int, g int64) {
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for t.seen[i].Load() < g {
		select {
		case <-t.wake:
		case <-timeout.C:
			b.Fatalf("object %d: got round %d, want %d after a minute", i, t.seen[i].Load(), g)
		}
	}
}

func benchmarkReconcile(b *testing.B, source, impl string) {
	objs := make([]runtime.Object, microObjects)
	for i := range objs {
		objs[i] = microObject(i, 0, 1)
	}
	cs := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var send func(i, round, n int)
	var events *watch.FakeWatcher
	switch source {
	case "event":
		events = watch.NewFakeWithChanSize(microObjects+8, false)
		var watches atomic.Int32
		cs.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) {
			if watches.Add(1) > 1 {
				panic("benchmark: a second watch of configmaps would miss updates")
			}
			return true, events, nil
		})
		send = func(i, round, n int) { events.Modify(microObject(i, round, 2+n)) }
	case "patch":
		send = func(i, round, _ int) {
			patch := []byte(`{"metadata":{"annotations":{"` + harness.RoundAnnotation + `":"` + strconv.Itoa(round) + `"}}}`)
			_, err := cs.CoreV1().ConfigMaps(microNamespace).Patch(ctx, harness.ObjectName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil {
				b.Fatal(err)
			}
		}
	}

	t := newTracker(microObjects)
	idle := func() {}
	stopped := make(chan struct{})
	switch impl {
	case "ctrl", "ctrl-copy":
		mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: cs, Namespace: microNamespace})
		if err != nil {
			b.Fatal(err)
		}
		_, err = ctrl.NewController(mgr, "bench", func(_ context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			t.observe(cm)
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{Workers: microWorkers, CopyObject: impl == "ctrl-copy"})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer close(stopped)
			if err := mgr.Start(ctx); err != nil {
				b.Error(err)
			}
		}()
		idle = func() {
			if err := mgr.WaitIdle(ctx, 0); err != nil {
				b.Fatal(err)
			}
		}
	case "raw-strip", "raw-strip-copy":
		opts := rawctl.Options{Namespace: microNamespace, Workers: microWorkers, StripManagedFields: true, Copy: impl == "raw-strip-copy"}
		c, factory, err := rawctl.New(cs, opts, t.observe)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer close(stopped)
			c.Run(ctx, factory)
		}()
	case "bare":
		for _, o := range objs {
			t.observe(o.(*corev1.ConfigMap))
		}
		go func() {
			defer close(stopped)
			for {
				select {
				case e := <-events.ResultChan():
					t.observe(e.Object.(*corev1.ConfigMap))
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for i := range microObjects {
		t.waitFor(b, i, 0)
	}
	idle()
	initial := t.reconciles.Load()

	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		i, round := n%microObjects, n/microObjects+1
		if round > 1 {
			t.waitFor(b, i, int64(round-1)) // at most one update per object in flight
		}
		send(i, round, n)
	}
	for n := max(b.N-microObjects, 0); n < b.N; n++ {
		t.waitFor(b, n%microObjects, int64(n/microObjects+1))
	}
	idle()
	b.StopTimer()
	b.ReportMetric(float64(t.reconciles.Load()-initial)/float64(b.N), "reconciles/op")
	cancel()
	<-stopped
}
