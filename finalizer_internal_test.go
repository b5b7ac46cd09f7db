package ctrl

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestFinalizeOnceAfterStaleRead drives, every time, the race that
// TestFinalizeOnce meets by chance under load: a reconcile is queued while
// the removal of the finalizer by the reconcile before it is not in the
// cache yet. It must wait for the removal, not read the object as it was
// before, and finalize must not run again.
func TestFinalizeOnceAfterStaleRead(t *testing.T) {
	const finalizer = "example.com/cleanup"
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ns-a"}})
	var gate heldEvents
	cs.PrependWatchReactor("configmaps", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		return true, gate.watch(w), nil
	})
	mgr, err := NewManager(Options{FakeClientset: cs})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(mgr, "finalizer", func(context.Context, *corev1.ConfigMap) (Result, error) {
		return Result{}, nil
	}, ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var finalized atomic.Int32
	var waited atomic.Bool
	if err := c.OnFinalize(finalizer, func(ctx context.Context, cm *corev1.ConfigMap) error {
		if finalized.Add(1) == 1 {
			gate.hold() // the removal of the finalizer, and the deletion, wait
			c.Enqueue(KeyOf(cm))
			go func() {
				// Release the events once the queued reconcile waits for
				// the removal.
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if c.nAwaiting.Load() > 0 {
						waited.Store(true)
						break
					}
				}
				gate.release()
			}()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var stale atomic.Bool
	c.afterRead = func(key Key, read *corev1.ConfigMap) {
		if finalized.Load() == 1 && read.DeletionTimestamp != nil && slices.Contains(read.Finalizers, finalizer) {
			stale.Store(true) // read from before the removal of the finalizer
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
		gate.stopAll()
	}()
	idle := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	idle()
	cms, err := NewClient[*corev1.ConfigMap](mgr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, Key{Namespace: "ns", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	idle()
	if !waited.Load() {
		t.Fatal("no reconcile waited for the removal of the finalizer: the test drove nothing")
	}
	if stale.Load() {
		t.Error("a reconcile read the object as it was before the removal of its finalizer")
	}
	if got := finalized.Load(); got != 1 {
		t.Errorf("finalize ran %d times, want once", got)
	}
}

// heldEvents holds the events of the watches it makes while held.
type heldEvents struct {
	mu      sync.Mutex
	held    chan struct{} // closed on release; nil: events pass
	watches []*heldWatch
}

func (g *heldEvents) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
}

func (g *heldEvents) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

// wait returns the channel an event waits on, nil if none.
func (g *heldEvents) wait() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *heldEvents) watch(in watch.Interface) watch.Interface {
	w := &heldWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{})}
	g.mu.Lock()
	g.watches = append(g.watches, w)
	g.mu.Unlock()
	go w.run(g.wait)
	return w
}

// stopAll stops the watches still open and waits for their goroutines.
func (g *heldEvents) stopAll() {
	g.mu.Lock()
	ws := g.watches
	g.mu.Unlock()
	for _, w := range ws {
		w.Stop()
		for range w.out {
		}
	}
}

type heldWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *heldWatch) run(wait func() chan struct{}) {
	defer close(w.out)
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.in.ResultChan():
			if !ok {
				return
			}
		case <-w.stop:
			return
		}
		if held := wait(); held != nil {
			select {
			case <-held:
			case <-w.stop:
				return
			}
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func (w *heldWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *heldWatch) ResultChan() <-chan watch.Event { return w.out }
