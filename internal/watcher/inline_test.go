package watcher

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/watch"
)

// inlineStore is a recorder that leaves, after each update of an object
// named run-*, the test's run to run inline. It keeps the run in one slot
// that the next such event fills again, as ctrl's feed does.
type inlineStore struct {
	recorder
	run  func(name string, y Yield)
	slot string // the reader's
}

func (s *inlineStore) Update(obj any) error {
	name := s.name(obj)
	if strings.HasPrefix(name, "run-") {
		s.slot = name
	}
	return s.recorder.Update(obj)
}

func (s *inlineStore) Add(obj any) error { return s.Update(obj) }

func (s *inlineStore) TakeInline() Work {
	if s.slot == "" {
		return nil
	}
	w := &work{s, s.slot}
	s.slot = ""
	return w
}

// work is a run taken from an inlineStore's slot.
type work struct {
	s    *inlineStore
	name string
}

func (w *work) RunInline(y Yield) { w.s.run(w.name, y) }

func (s *inlineStore) has(op string) bool { return slices.Contains(s.all(), op) }

// await reports whether the store is told op within 30 s, as a run on the
// reader that waits for its own cache does.
func (s *inlineStore) await(op string) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if s.has(op) {
			return true
		}
		time.Sleep(time.Millisecond) // polls the store, as such a run would
	}
	return false
}

// runInline runs a reflector over store until the test ends, and returns
// the fake watch it reads and a function that cancels it and returns once
// Run did.
func runInline(t *testing.T, store *inlineStore) (*watch.FakeWatcher, func()) {
	t.Helper()
	s := &server{watches: make(chan *watch.FakeWatcher, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: s.listerWatcher(), Store: store, Inline: store, Logger: logr.Discard()})
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	select {
	case w := <-s.watches:
		return w, stop
	case <-time.After(30 * time.Second):
		t.Fatal("no watch")
	}
	return nil, nil
}

func setBound(t *testing.T, d time.Duration) {
	old := InlineBound
	InlineBound = d
	t.Cleanup(func() { InlineBound = old })
}

// TestInlineRunWaitsForItsCache: a run that waits for the next event of
// the watch it runs on gets it: the watchdog hands the reading over, and
// the events after are stored in order.
func TestInlineRunWaitsForItsCache(t *testing.T) {
	defer goleak.VerifyNone(t)
	setBound(t, 5*time.Millisecond)
	_, _, bound0 := Stats()
	store := &inlineStore{}
	finished := make(chan bool, 1)
	store.run = func(name string, _ Yield) {
		finished <- store.await("update b@3")
	}
	w, stop := runInline(t, store)
	w.Modify(cm("run-a", "2"))
	w.Modify(cm("b", "3"))
	if !<-finished {
		t.Fatal("the inline run never saw the event after its own")
	}
	w.Modify(cm("c", "4"))
	waitFor(t, "c is stored", func() bool { return store.has("update c@4") })
	stop()
	if got, want := store.all(), []string{"replace [] at 1", "update run-a@2", "update b@3", "update c@4"}; !slices.Equal(got, want) {
		t.Errorf("store saw %q, want %q", got, want)
	}
	if _, _, bound := Stats(); bound == bound0 {
		t.Error("the watchdog counted no hand-over")
	}
}

// TestYieldHandsOverAtOnce: a run that yields before it waits gets the
// next event with the watchdog too slow to matter.
func TestYieldHandsOverAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	setBound(t, time.Hour)
	_, yield0, _ := Stats()
	store := &inlineStore{}
	finished := make(chan bool, 1)
	store.run = func(name string, y Yield) {
		y.Now()
		y.Now() // a second yield does nothing
		finished <- store.await("update b@3")
	}
	w, stop := runInline(t, store)
	w.Modify(cm("run-a", "2"))
	w.Modify(cm("b", "3"))
	if !<-finished {
		t.Fatal("the inline run never saw the event after its own")
	}
	stop()
	if _, yield, _ := Stats(); yield != yield0+1 {
		t.Errorf("counted %d hand-overs by yield, want 1", yield-yield0)
	}
}

// TestRunEndsBeforeAHandedOverRun: Run returns once nothing reads the
// watch, though a run it handed the reading away from goes on; that run's
// goroutine ends with it.
func TestRunEndsBeforeAHandedOverRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	setBound(t, time.Hour)
	store := &inlineStore{}
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	store.run = func(name string, y Yield) {
		defer wg.Done()
		y.Now()
		close(started)
		<-release
	}
	w, stop := runInline(t, store)
	w.Modify(cm("run-a", "2"))
	<-started
	stop() // returns while the run waits: nothing reads any more
	close(release)
	wg.Wait()
}

// TestQuickRunsKeepTheReader: runs that end at once hand nothing over.
func TestQuickRunsKeepTheReader(t *testing.T) {
	defer goleak.VerifyNone(t)
	setBound(t, time.Hour)
	runs0, yield0, bound0 := Stats()
	store := &inlineStore{}
	var ran []string
	store.run = func(name string, _ Yield) { ran = append(ran, name) } // the reader's alone
	w, stop := runInline(t, store)
	for _, n := range []string{"run-a", "b", "run-c", "run-d"} {
		w.Modify(cm(n, "2"))
	}
	waitFor(t, "run-d is stored", func() bool { return store.has("update run-d@2") })
	stop()
	if want := []string{"run-a@2", "run-c@2", "run-d@2"}; !slices.Equal(ran, want) {
		t.Errorf("ran %q, want %q", ran, want)
	}
	runs, yield, bound := Stats()
	if runs-runs0 != 3 || yield != yield0 || bound != bound0 {
		t.Errorf("got %d runs, %d and %d hand-overs, want 3, 0, 0", runs-runs0, yield-yield0, bound-bound0)
	}
}

// TestRunHoldsItsInputs: a run whose goroutine stalls once it is marked
// running, until the watchdog has handed the reading over and the next
// event's run has run, still runs with its own event's inputs, once; the
// next event filling the store's slot again changes nothing for it.
func TestRunHoldsItsInputs(t *testing.T) {
	defer goleak.VerifyNone(t)
	setBound(t, 5*time.Millisecond)
	stalled, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	testHookRunning = func() {
		if first.CompareAndSwap(false, true) {
			close(stalled)
			<-release
		}
	}
	defer func() { testHookRunning = nil }()
	store := &inlineStore{}
	var mu sync.Mutex
	var ran []string
	var wg sync.WaitGroup
	wg.Add(2)
	store.run = func(name string, _ Yield) {
		defer wg.Done()
		mu.Lock()
		ran = append(ran, name)
		mu.Unlock()
	}
	ranAll := func(names ...string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(ran, names)
	}
	w, stop := runInline(t, store)
	w.Modify(cm("run-a", "2"))
	<-stalled
	w.Modify(cm("run-b", "3"))
	waitFor(t, "run-b runs on the new reader", func() bool { return ranAll("run-b@3") })
	close(release)
	wg.Wait()
	stop()
	if !ranAll("run-b@3", "run-a@2") {
		t.Errorf("ran %q, want run-b@3, then run-a@2", ran)
	}
}

// TestPace: a controller runs inline until a long reconcile; then only
// after as many short ones in a row as it needs, 16, or twice as many
// after each long one before it was back, up to 4096; back for as long
// again, it needs half as many, down to none.
func TestPace(t *testing.T) {
	var p Pace
	short, long := InlineShort/2, InlineShort
	if !p.Inline() {
		t.Fatal("the zero Pace runs nothing inline")
	}
	p.Observe(short)
	if !p.Inline() {
		t.Fatal("a short reconcile stopped inline runs")
	}
	p.Observe(long)
	for _, need := range []int{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 4096} {
		for i := range need {
			if p.Inline() {
				t.Fatalf("inline after a long reconcile and %d short ones, want %d", i, need)
			}
			p.Observe(short)
		}
		if !p.Inline() {
			t.Fatalf("not inline after %d short reconciles in a row", need)
		}
		p.Observe(short)
		if !p.Inline() {
			t.Fatalf("not inline after %d short reconciles in a row", need+1)
		}
		p.Observe(long)
		if p.Inline() {
			t.Fatal("inline after a long reconcile")
		}
	}
	// Now 4096 are needed, then 4096 more to forget.
	for i := 0; p.need.Load() > 0; i++ {
		if i > 3*4096 {
			t.Fatalf("still needs %d after %d short reconciles", p.need.Load(), i)
		}
		p.Observe(short)
	}
	p.Observe(long)
	for range 16 {
		if p.Inline() {
			t.Fatal("inline after a long reconcile, back from 4096")
		}
		p.Observe(short)
	}
	if !p.Inline() {
		t.Fatal("not inline after 16 short reconciles once forgotten")
	}
}
