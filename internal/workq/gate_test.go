package workq_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/internal/workq"
)

// waitUntil polls cond until it holds, failing the test after a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestAddAndTake: the caller takes the key it queues when a worker would
// have, and only then; the key holds a worker's place while it is out.
func TestAddAndTake(t *testing.T) {
	q := newQueue(t, 1)
	a, b := key{name: "a"}, key{name: "b"}

	k, it, ok := q.AddAndTake(a, "created")
	if !ok || k != a || !slices.Equal(it.Causes.list, []string{"created"}) {
		t.Fatalf("idle queue: got %v %v %v, want a [created] true", k, it.Causes, ok)
	}
	if q.Processing() != 1 || q.Len() != 0 {
		t.Fatalf("taken: got Processing %d, Len %d, want 1, 0", q.Processing(), q.Len())
	}
	// Out already: queued again, for after Done, not taken twice.
	if _, _, ok := q.AddAndTake(a, "updated"); ok {
		t.Fatal("a key handed out was handed out again")
	}
	// The only place is held: b is queued, and a worker waits for the place.
	if _, _, ok := q.AddAndTake(b, "created"); ok {
		t.Fatal("took b while a held the only place")
	}
	got := make(chan key, 2)
	go func() {
		for range 2 {
			k, _, shutdown := q.Get()
			if shutdown {
				return
			}
			got <- k
			q.Done(k)
		}
	}()
	waitUntil(t, "the worker waits", func() bool { return q.Idle() == 1 })
	select {
	case k := <-got:
		t.Fatalf("a worker took %v while a held the only place", k)
	default:
	}
	q.Done(a)
	first, second := <-got, <-got
	if first != b || second != a {
		t.Errorf("after Done: the worker took %v then %v, want b then a", first, second)
	}
}

// TestAddAndTakeDeclines: nothing is taken while another key is queued or
// the queue shuts down.
func TestAddAndTakeDeclines(t *testing.T) {
	q := newQueue(t, 2)
	q.Add(key{name: "x"}, "created")
	if _, _, ok := q.AddAndTake(key{name: "a"}, "created"); ok {
		t.Error("took a key while another was queued first")
	}
	if q.Len() != 2 {
		t.Errorf("got Len %d, want 2", q.Len())
	}
	q.ShutDown()
	if _, _, ok := q.AddAndTake(key{name: "b"}, "created"); ok {
		t.Error("took a key after ShutDown")
	}
}

// TestShutDownWaitsForTakenKeys: workers return from Get only once a key
// AddAndTake handed out was given back.
func TestShutDownWaitsForTakenKeys(t *testing.T) {
	q := newQueue(t, 2)
	a := key{name: "a"}
	if _, _, ok := q.AddAndTake(a, "created"); !ok {
		t.Fatal("not taken")
	}
	var exited atomic.Int32
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, _, shutdown := q.Get(); !shutdown {
				t.Error("got a key, want shutdown")
			}
			exited.Add(1)
		})
	}
	q.ShutDown()
	// The workers see the shutdown and wait for a; poll a while to catch one
	// returning early.
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		if exited.Load() != 0 {
			t.Fatal("a worker returned while a key was still out")
		}
		time.Sleep(time.Millisecond)
	}
	q.Done(a)
	wg.Wait()
}

// TestGateLosesNoKey: keys queued from several goroutines, some taken by
// AddAndTake, are all handed out, none to two takers at once and never
// more than Workers at once.
func TestGateLosesNoKey(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			q := newQueue(t, workers)
			const keys, rounds = 20, 300
			var mu sync.Mutex
			out := map[key]bool{}
			var running, most, handled atomic.Int64
			serve := func(k key) {
				mu.Lock()
				if out[k] {
					t.Errorf("%v handed out twice at once", k)
				}
				out[k] = true
				mu.Unlock()
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				handled.Add(1)
				running.Add(-1)
				mu.Lock()
				out[k] = false
				mu.Unlock()
				q.Done(k)
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for {
						k, _, shutdown := q.Get()
						if shutdown {
							return
						}
						serve(k)
					}
				})
			}
			var added atomic.Int64
			var adders sync.WaitGroup
			for g := range 3 {
				adders.Go(func() {
					for i := range rounds {
						k := key{name: fmt.Sprint((g*rounds + i) % keys)}
						added.Add(1)
						if g == 0 {
							if k, _, ok := q.AddAndTake(k, "event"); ok {
								serve(k)
							}
							continue
						}
						q.Add(k, "event")
					}
				})
			}
			adders.Wait()
			waitUntil(t, "every key is handled", func() bool { return q.Len() == 0 && q.Processing() == 0 })
			q.ShutDown()
			wg.Wait()
			if m := most.Load(); m > int64(workers) {
				t.Errorf("%d keys out at once, want at most %d", m, workers)
			}
			if handled.Load() == 0 || handled.Load() > added.Load() {
				t.Errorf("handled %d of %d adds", handled.Load(), added.Load())
			}
		})
	}
}

// TestClaimMissesNoWake: a key another goroutine queues while AddAndTake
// claims its own wakes nobody then, so AddAndTake wakes a worker for it.
func TestClaimMissesNoWake(t *testing.T) {
	q := newQueue(t, 2)
	got := make(chan key, 1)
	go func() {
		k, _, shutdown := q.Get()
		if !shutdown {
			got <- k
			q.Done(k)
		}
	}()
	waitUntil(t, "the worker waits", func() bool { return q.Idle() == 1 })
	x := key{name: "x"}
	workq.SetHookClaiming(func() { q.Add(x, "created") })
	defer workq.SetHookClaiming(nil)
	if k, _, ok := q.AddAndTake(key{name: "a"}, "created"); !ok || k.name != "a" {
		t.Fatalf("got %v %v, want a true", k, ok)
	}
	select {
	case k := <-got:
		if k != x {
			t.Errorf("the worker took %v, want x", k)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("x, queued during the claim, was never taken")
	}
}
