// Package workq is a controller's work queue: client-go's delaying
// workqueue (no key to two workers at once) plus why each key was queued,
// a backlog for listed keys, keys waiting for an API server, fairness
// between the clusters of a fleet, and what the idle check needs:
//
//   - Exact: Len() == 0 && Processing() == 0 means no key is queued or
//     handed out; the count changes under the workqueue's lock.
//   - Live first: listed keys enter the queue a window at a time, so keys
//     queued meanwhile go first.
//   - Fair: with more than one worker, one member cluster's keys never hold
//     every worker.
//
// The queue does not know what a key or a cause is: [Config] tells it.
package workq

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Config says how a queue names its metrics, limits its retries and
// records causes. Every field must be set: without a Name the workqueue
// keeps no metrics, and Processing counts nothing.
type Config[K comparable, C, E any] struct {
	Name     string                        // the workqueue's name, a metrics label
	Workers  int                           // more than one turns fairness on
	Members  func() int                    // how many member clusters are engaged
	Cluster  func(K) string                // the cluster of a key, "" for the manager's own
	Limiter  workqueue.TypedRateLimiter[K] // the backoff and budget of retries after errors
	Metrics  workqueue.MetricsProvider     // wrapped: Processing is counted in its calls
	Activity *atomic.Uint64                // counted up at every hand-out and Done, for the idle check

	// Note adds a cause to a key's causes, E, and Merge those of another;
	// Count returns how many causes were noted.
	Note  func(*E, C)
	Merge func(into, from *E)
	Count func(*E) int
	// Self returns c as caused by k's own object, for a [Batch] with Self.
	Self func(c C, k K) C
	// Retry is the cause of a retry and of a key released by [Queue.Release].
	Retry C
}

// Queue is a work queue of keys K, whose causes C it collects in an E per
// key until a worker takes the key. Safe for concurrent use.
type Queue[K comparable, C, E any] struct {
	wq        workqueue.TypedDelayingInterface[K]
	cfg       Config[K, C, E]
	conflicts workqueue.TypedRateLimiter[K] // conflicts: per-key backoff, no shared budget

	// processing counts keys handed out and not yet Done; it changes under the
	// workqueue's lock (see counting), so Len() == 0 && processing == 0 is exact.
	processing atomic.Int64

	mu       sync.Mutex
	causes   map[K]*E         // causes of keys queued since their last get
	spare    []*E             // records given back (Recycle), cleared, for keys queued next
	due      map[K]delayed[C] // delayed keys not yet handed out
	waiting  map[K]string     // keys waiting for an API server: the cluster's
	released map[K]time.Time  // keys the server's return released, and when

	// The backlog holds listed keys until the queue has room (the Live first guarantee),
	// keeping the workqueue's never-shrinking maps small. workqueue_depth counts it.
	backlogMu  sync.Mutex
	backlog    []Batch[K, C]
	backlogLen atomic.Int64 // keys in the backlog, stored after they are in the queue
	depth      workqueue.GaugeMetric

	fair *fairness[K, E] // with more than one worker; under mu

	gate gate // where idle workers wait (gate.go)
}

// fairness keeps one slow member cluster from holding every worker: once a
// member's key was queued, a key whose cluster already runs limit
// reconciles is set aside, and queued again (with its causes) when one of
// them ends. The other clusters always have workers - limit workers.
type fairness[K comparable, E any] struct {
	limit   int
	fleet   atomic.Bool    // a key of a member cluster was queued
	members func() int     // how many member clusters are engaged
	running map[string]int // keys handed out and not done, per cluster
	aside   map[K]Item[E]  // keys set aside, with what the queue knew of them
	order   map[string][]K // keys set aside per cluster, oldest first
}

func (s *fairness[K, E]) capped() bool { return s.fleet.Load() && s.members() > 0 }

type delayed[C any] struct {
	at    time.Time
	cause C
}

// Batch is keys that entered the backlog together, with their cause; Self:
// each caused by its own object (see Config.Self). The queue owns Keys and
// clears them as they enter the queue.
type Batch[K comparable, C any] struct {
	Keys  []K
	Cause C
	Self  bool
}

// Item is what the queue knew of a key when [Queue.Get] handed it out.
type Item[E any] struct {
	Causes   *E        // never nil; the taker's until it gives it back (Recycle)
	Released time.Time // when the server's return released it, if it did
}

// backlogWindow is how many keys the queue holds before the backlog waits.
const backlogWindow = 128

// New returns an empty queue.
func New[K comparable, C, E any](cfg Config[K, C, E]) *Queue[K, C, E] {
	q := &Queue[K, C, E]{
		cfg:       cfg,
		conflicts: workqueue.NewTypedItemExponentialFailureRateLimiter[K](5*time.Millisecond, 1000*time.Second),
		causes:    map[K]*E{},
		due:       map[K]delayed[C]{},
		waiting:   map[K]string{},
		released:  map[K]time.Time{},
	}
	if w := cfg.Workers; w > 1 {
		q.fair = &fairness[K, E]{limit: w - max(1, w/4), members: cfg.Members, running: map[string]int{},
			aside: map[K]Item[E]{}, order: map[string][]K{}}
	}
	q.gate.init()
	metrics := counting{cfg.Metrics, &q.processing, cfg.Activity, &q.depth}
	q.wq = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[K]{
		Name:            cfg.Name,
		MetricsProvider: metrics,
		Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[K]{
			Name: cfg.Name, MetricsProvider: metrics, Queue: &fifo[K]{queued: q.gate.queued},
		}),
	})
	return q
}

// Add queues key with cause.
func (q *Queue[K, C, E]) Add(key K, cause C) {
	q.mu.Lock()
	q.cfg.Note(q.causesLocked(key), cause)
	q.mu.Unlock()
	q.wq.Add(key)
}

func (q *Queue[K, C, E]) causesLocked(key K) *E {
	cs := q.causes[key]
	if cs == nil {
		cs = q.newCausesLocked()
		q.causes[key] = cs
		if q.fair != nil && !q.fair.fleet.Load() && q.cfg.Cluster(key) != "" {
			q.fair.fleet.Store(true)
		}
	}
	return cs
}

// newCausesLocked returns an empty causes record, a spare one if any.
func (q *Queue[K, C, E]) newCausesLocked() *E {
	if n := len(q.spare); n > 0 {
		cs := q.spare[n-1]
		q.spare = q.spare[:n-1]
		return cs
	}
	return new(E)
}

// maxSpare bounds the records Recycle keeps: about as many as keys are
// handed out at once.
const maxSpare = 64

// Recycle gives back the causes record of an item Get handed out, for a
// key queued later, saving an allocation per key queued. Its taker must
// keep no pointer to the record; copies of it may keep what it refers to,
// since the record is cleared, not refilled in place.
func (q *Queue[K, C, E]) Recycle(cs *E) {
	var zero E
	*cs = zero
	q.mu.Lock()
	if len(q.spare) < maxSpare {
		q.spare = append(q.spare, cs)
	}
	q.mu.Unlock()
}

// Merge adds cs to the causes of key, for when it is next handed out.
func (q *Queue[K, C, E]) Merge(key K, cs *E) {
	q.mu.Lock()
	q.cfg.Merge(q.causesLocked(key), cs)
	q.mu.Unlock()
}

// AddBacklog queues b's keys through the backlog: a window at a time.
func (q *Queue[K, C, E]) AddBacklog(b Batch[K, C]) {
	if len(b.Keys) == 0 {
		return
	}
	q.backlogMu.Lock()
	q.backlog = append(q.backlog, b)
	q.backlogLen.Add(int64(len(b.Keys)))
	q.addDepth(len(b.Keys))
	q.backlogMu.Unlock()
	q.refill()
}

// refill moves backlog keys into the queue while it holds fewer than
// backlogWindow, from every batch in turn (fair between lists). Workers
// call it before waiting, so a backlog never waits on an empty queue.
func (q *Queue[K, C, E]) refill() {
	if q.backlogLen.Load() == 0 {
		return
	}
	q.backlogMu.Lock()
	defer q.backlogMu.Unlock()
	room := backlogWindow - q.wq.Len()
	moved := 0
	for room > 0 && len(q.backlog) > 0 {
		share := max(1, room/len(q.backlog))
		for i := 0; i < len(q.backlog) && room > 0; {
			b := &q.backlog[i]
			n := min(len(b.Keys), share, room)
			q.mu.Lock()
			for _, k := range b.Keys[:n] {
				c := b.Cause
				if b.Self {
					c = q.cfg.Self(c, k)
				}
				q.cfg.Note(q.causesLocked(k), c)
			}
			q.mu.Unlock()
			for _, k := range b.Keys[:n] {
				q.wq.Add(k)
			}
			clear(b.Keys[:n])
			b.Keys = b.Keys[n:]
			room -= n
			moved += n
			if len(b.Keys) == 0 {
				q.backlog = slices.Delete(q.backlog, i, i+1) // lets the list's array go
			} else {
				i++
			}
		}
	}
	if len(q.backlog) == 0 {
		q.backlog = nil
	}
	q.addDepth(-moved) // the queue counted those it did not already hold
	q.backlogLen.Add(int64(-moved))
}

func (q *Queue[K, C, E]) addDepth(n int) {
	if g, ok := q.depth.(interface{ Add(float64) }); ok {
		g.Add(float64(n))
	}
}

// counting counts keys in processing inside the workqueue's metric calls,
// made under its lock: the one place where hand-out and count are one step.
type counting struct {
	workqueue.MetricsProvider
	processing *atomic.Int64
	activity   *atomic.Uint64
	depth      *workqueue.GaugeMetric // the queue's, for the backlog to add to
}

func (c counting) NewDepthMetric(name string) workqueue.GaugeMetric {
	g := c.MetricsProvider.NewDepthMetric(name)
	*c.depth = g
	return g
}

func (c counting) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return step{c.MetricsProvider.NewLatencyMetric(name), c.processing, 1, c.activity}
}

func (c counting) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return step{c.MetricsProvider.NewWorkDurationMetric(name), c.processing, -1, c.activity}
}

type step struct {
	workqueue.HistogramMetric
	n        *atomic.Int64
	delta    int64
	activity *atomic.Uint64
}

func (s step) Observe(v float64) {
	s.n.Add(s.delta)
	s.activity.Add(1)
	s.HistogramMetric.Observe(v)
}

// AddAfter queues key with cause after d; the earliest of several stands.
func (q *Queue[K, C, E]) AddAfter(key K, d time.Duration, cause C) {
	if d <= 0 {
		q.Add(key, cause)
		return
	}
	at := time.Now().Add(d)
	q.mu.Lock()
	if cur, ok := q.due[key]; !ok || at.Before(cur.at) {
		q.due[key] = delayed[C]{at, cause}
	}
	q.mu.Unlock()
	q.wq.AddAfter(key, d)
}

// Retry queues key after the limiter's delay.
func (q *Queue[K, C, E]) Retry(key K) { q.AddAfter(key, q.cfg.Limiter.When(key), q.cfg.Retry) }

// RetryConflict queues key after its own backoff, spending no shared budget.
func (q *Queue[K, C, E]) RetryConflict(key K) {
	q.AddAfter(key, q.conflicts.When(key), q.cfg.Retry)
}

// Forget resets key's backoffs.
func (q *Queue[K, C, E]) Forget(key K) {
	q.cfg.Limiter.Forget(key)
	q.conflicts.Forget(key)
}

// Get blocks until it hands out the next key and what the queue knows of
// it (a due delayed key's cause joins its causes), skipping keys fairness
// sets aside, or until the queue shuts down and every key handed out was
// given back (shutdown true). Every key handed out must be given back
// with [Queue.Done].
func (q *Queue[K, C, E]) Get() (key K, it Item[E], shutdown bool) {
	for {
		q.refill()
		key, shutdown = q.take()
		if shutdown {
			return key, Item[E]{}, true
		}
		if it, ok := q.handOut(key); ok {
			return key, it, false
		}
	}
}

// take takes the next key from the workqueue when a worker's place is
// free, waiting at the gate, not in the workqueue, while there is none.
func (q *Queue[K, C, E]) take() (K, bool) {
	g := &q.gate
	for {
		g.taking.Lock()
		n := q.wq.Len()
		switch {
		case n > 0 && q.placeFree():
			key, shutdown := q.wq.Get() // at once
			g.taking.Unlock()
			return key, shutdown
		case n == 0 && q.wq.ShuttingDown() && q.processing.Load() == 0:
			g.taking.Unlock()
			var zero K
			return zero, true
		case n > 0:
			g.starved.Store(true)
		}
		g.taking.Unlock()
		g.wait(q.ready)
	}
}

// placeFree reports whether fewer keys than workers are handed out.
func (q *Queue[K, C, E]) placeFree() bool {
	return q.processing.Load() < int64(max(q.cfg.Workers, 1))
}

// ready reports whether take would not wait.
func (q *Queue[K, C, E]) ready() bool {
	n := q.wq.Len()
	return n > 0 && q.placeFree() || n == 0 && q.wq.ShuttingDown() && q.processing.Load() == 0
}

// AddAndTake queues key with cause, as Add does, and, if a worker would
// take it at once, hands it out to the caller instead, without waking
// one: with ok, the caller must process key (which may be another key
// queued meanwhile) and give it back with Done, as a worker does. It does
// not hand out keys while the queue shares its workers between clusters
// or shuts down, nor when no worker's place is free or another key is
// queued.
func (q *Queue[K, C, E]) AddAndTake(key K, cause C) (K, Item[E], bool) {
	q.mu.Lock()
	q.cfg.Note(q.causesLocked(key), cause)
	q.mu.Unlock()
	var zero K
	g := &q.gate
	if q.fair != nil && q.fair.fleet.Load() {
		q.wq.Add(key)
		return zero, Item[E]{}, false
	}
	g.taking.Lock()
	if q.wq.Len() > 0 || !q.placeFree() || q.wq.ShuttingDown() {
		g.taking.Unlock()
		q.wq.Add(key)
		return zero, Item[E]{}, false
	}
	g.claiming.Store(true)
	q.wq.Add(key) // wakes nobody: it is taken below
	if testHookClaiming != nil {
		testHookClaiming()
	}
	took := q.wq.Len() > 0 // none: key is handed out already, and queued again once done
	if took {
		key, _ = q.wq.Get() // at once
	}
	g.claiming.Store(false)
	g.taking.Unlock()
	if g.missed.Swap(false) && q.wq.Len() > 0 {
		g.wake() // a key queued by another goroutine meanwhile woke nobody
	}
	if !took {
		return zero, Item[E]{}, false
	}
	it, ok := q.handOut(key)
	if !ok { // not with fairness off; for safety
		return zero, Item[E]{}, false
	}
	return key, it, true
}

// handOut completes the hand-out of key, just taken: it returns what the
// queue knows of it, or false if fairness set it aside (it is given back).
func (q *Queue[K, C, E]) handOut(key K) (it Item[E], ok bool) {
	fair := q.fair
	if fair != nil && !fair.fleet.Load() {
		fair = nil // one cluster: nothing to share, nothing to count
	}
	capped := fair != nil && fair.capped()
	var again time.Duration
	defer func() {
		if again > 0 {
			q.wq.AddAfter(key, again)
		}
	}()
	q.mu.Lock()
	it = Item[E]{Causes: q.causes[key]}
	delete(q.causes, key)
	if it.Causes == nil {
		it.Causes = q.newCausesLocked()
	}
	if d, ok := q.due[key]; ok {
		if now := time.Now(); !now.Before(d.at) {
			delete(q.due, key)
			q.cfg.Note(it.Causes, d.cause)
		} else if q.cfg.Count(it.Causes) == 0 {
			// A delayed add came early, one a later AddAfter joined: its
			// key, with no cause, is drained, not reconciled. Add it again
			// for d, or the key never comes back for it.
			again = d.at.Sub(now)
		}
	}
	if at, ok := q.released[key]; ok {
		delete(q.released, key)
		it.Released = at
	}
	if s := fair; s != nil {
		cluster := q.cfg.Cluster(key)
		if aside, ok := s.aside[key]; ok { // queued again while set aside
			q.cfg.Merge(aside.Causes, it.Causes)
			if aside.Released.IsZero() {
				aside.Released = it.Released
			}
			s.aside[key] = aside
			q.mu.Unlock()
			q.wq.Done(key)
			q.gate.freed()
			return it, false
		}
		if capped && q.cfg.Count(it.Causes) > 0 && s.running[cluster] >= s.limit {
			s.aside[key] = it
			s.order[cluster] = append(s.order[cluster], key)
			q.mu.Unlock()
			q.addDepth(1)
			q.wq.Done(key)
			q.gate.freed()
			return it, false
		}
		s.running[cluster]++
	}
	q.mu.Unlock()
	return it, true
}

// Done gives back a key; keys set aside are queued first, so none waits on an empty queue.
func (q *Queue[K, C, E]) Done(key K) {
	// Until a member's key was queued nothing is counted (fleet never goes
	// back); keys handed out before then count their cluster low, briefly.
	if s := q.fair; s != nil && s.fleet.Load() {
		var back []K
		capped := s.capped()
		cluster := q.cfg.Cluster(key)
		q.mu.Lock()
		if s.running[cluster]--; s.running[cluster] <= 0 {
			delete(s.running, cluster)
		}
		for c, keys := range s.order {
			n := len(keys) // the last member left: all of them
			if capped {
				n = min(n, s.limit-s.running[c])
			}
			for _, k := range keys[:max(n, 0)] {
				it := s.aside[k]
				delete(s.aside, k)
				q.restoreLocked(k, it)
				back = append(back, k)
			}
			if n = max(n, 0); n == len(keys) {
				delete(s.order, c)
			} else {
				s.order[c] = keys[n:]
			}
		}
		q.mu.Unlock()
		q.addDepth(-len(back))
		for _, k := range back {
			q.wq.Add(k)
		}
	}
	q.wq.Done(key)
	q.gate.freed()
}

func (q *Queue[K, C, E]) restoreLocked(key K, it Item[E]) {
	q.cfg.Merge(q.causesLocked(key), it.Causes)
	if !it.Released.IsZero() {
		if at, ok := q.released[key]; !ok || it.Released.Before(at) {
			q.released[key] = it.Released
		}
	}
}

// ShutDown makes Get return shutdown once the queue is empty and every
// key handed out was given back; AddAfter queues nothing more.
func (q *Queue[K, C, E]) ShutDown() {
	q.wq.ShutDown()
	q.gate.shutDown()
}

// Len returns how many keys are queued, not counting the backlog, keys set
// aside, delayed or waiting.
func (q *Queue[K, C, E]) Len() int { return q.wq.Len() }

// Processing returns how many keys are handed out and not yet Done.
func (q *Queue[K, C, E]) Processing() int64 { return q.processing.Load() }

// BacklogLen returns how many keys wait in the backlog. Read it before Len:
// the backlog empties into the queue.
func (q *Queue[K, C, E]) BacklogLen() int64 { return q.backlogLen.Load() }

// AsideLen returns how many keys fairness set aside.
func (q *Queue[K, C, E]) AsideLen() int {
	if q.fair == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.fair.aside)
}

// DueAt returns when key, delayed, is due.
func (q *Queue[K, C, E]) DueAt(key K) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.due[key]
	return d.at, ok
}

// DueWithin reports whether a delayed key is due within d.
func (q *Queue[K, C, E]) DueWithin(d time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	limit := time.Now().Add(d)
	for _, e := range q.due {
		if e.at.Before(limit) {
			return true
		}
	}
	return false
}
