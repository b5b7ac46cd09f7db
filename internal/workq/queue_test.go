package workq_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl/internal/workq"
)

type key struct{ cluster, name string }

type causes struct{ list []string }

func newQueue(t *testing.T, workers int) *workq.Queue[key, string, causes] {
	q := workq.New(workq.Config[key, string, causes]{
		Name: "test", Workers: workers, Members: func() int { return 1 },
		Cluster:  func(k key) string { return k.cluster },
		Limiter:  workqueue.NewTypedItemExponentialFailureRateLimiter[key](0, 0),
		Metrics:  noMetrics{},
		Activity: new(atomic.Uint64),
		Note:     func(cs *causes, c string) { cs.list = append(cs.list, c) },
		Merge:    func(into, from *causes) { into.list = append(into.list, from.list...) },
		Count:    func(cs *causes) int { return len(cs.list) },
		Self:     func(c string, k key) string { return c + " " + k.name },
		Retry:    "retry",
	})
	t.Cleanup(q.ShutDown)
	return q
}

// get takes the next key, which must be queued already, and gives it back.
func get(t *testing.T, q *workq.Queue[key, string, causes]) (key, []string) {
	t.Helper()
	k, it, shutdown := q.Get()
	if shutdown {
		t.Fatal("got shutdown, want a key")
	}
	q.Done(k)
	return k, it.Causes.list
}

func TestCausesAndCounts(t *testing.T) {
	q := newQueue(t, 1)
	a := key{name: "a"}
	q.Add(a, "created")
	q.Add(a, "updated")
	if q.Len() != 1 {
		t.Fatalf("got Len %d, want 1", q.Len())
	}
	k, it, _ := q.Get()
	if q.Len() != 0 || q.Processing() != 1 {
		t.Errorf("handed out: got Len %d, Processing %d, want 0, 1", q.Len(), q.Processing())
	}
	if want := []string{"created", "updated"}; k != a || !slices.Equal(it.Causes.list, want) {
		t.Errorf("got %v %v, want %v %v", k, it.Causes.list, a, want)
	}
	q.Done(k)
	if q.Processing() != 0 {
		t.Errorf("done: got Processing %d, want 0", q.Processing())
	}
}

func TestBacklogLetsLiveKeysFirst(t *testing.T) {
	q := newQueue(t, 1)
	var keys []key
	for i := range 300 {
		keys = append(keys, key{name: string(rune('A' + i))})
	}
	q.AddBacklog(workq.Batch[key, string]{Keys: slices.Clone(keys), Cause: "listed", Self: true})
	if q.Len() != 128 || q.BacklogLen() != 172 {
		t.Fatalf("got Len %d, BacklogLen %d, want 128, 172", q.Len(), q.BacklogLen())
	}
	live := key{name: "live"}
	q.Add(live, "updated")
	for i := range 129 {
		k, cs := get(t, q)
		if i < 128 && (k != keys[i] || cs[0] != "listed "+k.name) {
			t.Fatalf("key %d: got %v %v, want %v listed by itself", i, k, cs, keys[i])
		}
		if i == 128 && k != live {
			t.Fatalf("key 128: got %v, want the live key before the rest of the backlog", k)
		}
	}
}

func TestFairSetsAsideOneClustersKeys(t *testing.T) {
	q := newQueue(t, 4) // a cluster runs at most 3 keys
	for _, n := range []string{"1", "2", "3", "4"} {
		q.Add(key{"m", n}, "created")
	}
	var running []key
	for range 3 {
		k, _, _ := q.Get()
		running = append(running, k)
	}
	q.Add(key{"", "own"}, "created")
	if k, _, _ := q.Get(); k.cluster != "" {
		t.Fatalf("got %v, want the own cluster's key while m runs 3", k)
	}
	if q.AsideLen() != 1 {
		t.Errorf("got AsideLen %d, want 1", q.AsideLen())
	}
	q.Done(running[0])
	if k, it, _ := q.Get(); k != (key{"m", "4"}) || !slices.Equal(it.Causes.list, []string{"created"}) {
		t.Errorf("got %v %v, want the key set aside, with its cause", k, it.Causes.list)
	}
}

func TestWaitForServer(t *testing.T) {
	q := newQueue(t, 1)
	a := key{"m", "a"}
	if !q.WaitForServer(a, "m") || q.WaitForServer(a, "m") {
		t.Error("WaitForServer: want true the first time only")
	}
	if q.WaitingLen() != 1 || q.WaitingFor("m") != 1 || !slices.Equal(q.WaitingClusters(), []string{"m"}) {
		t.Errorf("got %d waiting, %d for m, clusters %v; want 1, 1, [m]", q.WaitingLen(), q.WaitingFor("m"), q.WaitingClusters())
	}
	if n := q.Release("m", 0); n != 1 {
		t.Fatalf("Release: got %d, want 1", n)
	}
	k, it, _ := q.Get()
	if k != a || !slices.Equal(it.Causes.list, []string{"retry"}) || it.Released.IsZero() {
		t.Errorf("got %v %v released %v, want %v retried after its release", k, it.Causes.list, it.Released, a)
	}
	q.Done(k)
	q.WaitForServer(a, "m")
	if n := q.DropWaiting("m"); n != 1 || q.WaitingLen() != 0 {
		t.Errorf("DropWaiting: got %d, %d left, want 1, 0", n, q.WaitingLen())
	}
}

func TestDue(t *testing.T) {
	q := newQueue(t, 1)
	q.AddAfter(key{name: "a"}, time.Hour, "requeue")
	q.AddAfter(key{name: "a"}, 2*time.Hour, "requeue") // the earliest stands
	if at, ok := q.DueAt(key{name: "a"}); !ok || time.Until(at) > time.Hour {
		t.Errorf("got DueAt %v %v, want within an hour", at, ok)
	}
	if q.DueWithin(time.Minute) || !q.DueWithin(2*time.Hour) {
		t.Error("DueWithin: want false for a minute, true for two hours")
	}
}

type noMetrics struct{}

func (noMetrics) Inc()                                                   {}
func (noMetrics) Dec()                                                   {}
func (noMetrics) Set(float64)                                            {}
func (noMetrics) Observe(float64)                                        {}
func (noMetrics) NewDepthMetric(string) workqueue.GaugeMetric            { return noMetrics{} }
func (noMetrics) NewAddsMetric(string) workqueue.CounterMetric           { return noMetrics{} }
func (noMetrics) NewLatencyMetric(string) workqueue.HistogramMetric      { return noMetrics{} }
func (noMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noMetrics{} }
func (noMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetrics{}
}
func (noMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetrics{}
}
func (noMetrics) NewRetriesMetric(string) workqueue.CounterMetric { return noMetrics{} }

func TestRecycle(t *testing.T) {
	q := newQueue(t, 1)
	q.Add(key{name: "a"}, "created")
	k, it, _ := q.Get()
	first := it.Causes
	q.Done(k)
	q.Recycle(first)
	if first.list != nil {
		t.Fatalf("a recycled record keeps %v, want it cleared", first.list)
	}
	// The next key queued gets the record back, empty, and only its own causes.
	q.Add(key{name: "b"}, "updated")
	k, it, _ = q.Get()
	if it.Causes != first || !slices.Equal(it.Causes.list, []string{"updated"}) {
		t.Errorf("got record %p with %v, want the recycled %p with [updated]", it.Causes, it.Causes.list, first)
	}
	q.Done(k)
	cycle := func(recycle bool) func() {
		return func() {
			q.Add(key{name: "c"}, "updated")
			k, it, _ := q.Get()
			q.Done(k)
			if recycle {
				it.Causes.list = nil // as a taker that copied what it kept
				q.Recycle(it.Causes)
			}
		}
	}
	without, with := testing.AllocsPerRun(1000, cycle(false)), testing.AllocsPerRun(1000, cycle(true))
	if with != without-1 {
		t.Errorf("a key queued and taken allocates %v times, %v with its record given back; want one fewer", without, with)
	}
}

// TestRetryAfterEarlyHandOut keeps a retry that its delayed add merged
// into an earlier one: the key handed out early, with no cause of its own
// (a worker drains it), must still be handed out when its retry is due. It
// is the sequence a conflict, then two failures, made in a controller: the
// last retry's delayed add joined the one still pending from the failure
// before, which handed the key out before the last retry was due.
func TestRetryAfterEarlyHandOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 1)
		a := key{name: "a"}
		q.Add(a, "owned")
		k, _, _ := q.Get()                         // t=0: reconciling, for an owned object
		q.AddAfter(a, 5*time.Millisecond, "retry") // the conflict's retry, due at 5
		time.Sleep(6 * time.Millisecond)           // it comes while a runs
		q.AddAfter(a, 5*time.Millisecond, "retry") // t=6: failed; due at 11
		q.Done(k)
		k, it, _ := q.Get() // the conflict's retry
		if !slices.Equal(it.Causes.list, []string{"retry"}) {
			t.Fatalf("got causes %v, want the retry", it.Causes.list)
		}
		q.AddAfter(a, 10*time.Millisecond, "retry") // t=6: failed again; due at 16
		q.Done(k)
		time.Sleep(7 * time.Millisecond) // t=13: the add due at 11 came
		k, it, _ = q.Get()
		if len(it.Causes.list) != 0 {
			t.Fatalf("at 13: got causes %v, want none: the retry is due at 16", it.Causes.list)
		}
		q.Done(k) // drained: no cause, no reconcile
		got := make(chan []string)
		go func() {
			_, it, shutdown := q.Get()
			if !shutdown {
				got <- it.Causes.list
			}
		}()
		select {
		case cs := <-got:
			if !slices.Equal(cs, []string{"retry"}) {
				t.Errorf("got causes %v, want the retry", cs)
			}
		case <-time.After(time.Minute):
			at, _ := q.DueAt(a)
			t.Errorf("the retry due at 16 ms was never handed out (due %s ago)", time.Since(at))
			q.ShutDown()
		}
	})
}

// TestRetryDue says when a delayed key is due, and how late it is once
// due and not yet handed out: never a negative time.
func TestRetryDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 1)
		a := key{name: "a"}
		if got := q.RetryDue(a); got != "" {
			t.Errorf("not delayed: got %q, want none", got)
		}
		q.Add(key{name: "busy"}, "event")
		k, _, _ := q.Get() // the only worker's place
		q.AddAfter(a, 1200*time.Millisecond, "retry")
		if got, want := q.RetryDue(a), ", next retry in 1.2s"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		time.Sleep(1203 * time.Millisecond)
		if got, want := q.RetryDue(a), ", retry overdue by 3ms"; got != want {
			t.Errorf("due while the worker is busy: got %q, want %q", got, want)
		}
		q.Done(k)
	})
}
