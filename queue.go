package ctrl

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// RateLimiter decides how long a key waits before a retry after an error: any of
// client-go's typed workqueue rate limiters over [Key].
type RateLimiter = workqueue.TypedRateLimiter[Key]

// DefaultRateLimiter returns the limiter controllers use unless
// ControllerOptions.RateLimiter is set, controller-runtime's: the larger of
// a per-key exponential backoff from 5 ms to 1000 s and a token bucket of
// 10 retries per second, burst 100. Failures that only mean the API server
// was unreachable do not go through it (they wait for the server), and
// conflicts get the per-key backoff alone; see README.md#retries.
func DefaultRateLimiter() RateLimiter {
	return workqueue.DefaultTypedControllerRateLimiter[Key]()
}

// queue is client-go's delaying workqueue (no key to two workers at once), plus
// causes, the backlog, keys waiting for a server, and what the idle check needs.
type queue struct {
	workqueue.TypedDelayingInterface[Key]
	limiter   RateLimiter // errors
	conflicts RateLimiter // conflicts: per-key backoff, no shared budget

	// processing counts keys handed out and not yet Done; it changes under the
	// workqueue's lock (see counting), so Len() == 0 && processing == 0 is exact.
	processing atomic.Int64

	mu       sync.Mutex
	causes   map[Key]*Causes   // causes of keys queued since their last get
	due      map[Key]delayed   // delayed keys not yet handed out
	waiting  map[Key]string    // keys waiting for an API server: the cluster's
	released map[Key]time.Time // keys the server's return released, and when

	// The backlog holds listed keys until the queue has room (the Live first guarantee),
	// keeping the workqueue's never-shrinking maps small. workqueue_depth counts it.
	backlogMu  sync.Mutex
	backlog    []batch
	backlogLen atomic.Int64 // keys in the backlog, stored after they are in the queue
	depth      workqueue.GaugeMetric

	fair *fairness // with more than one worker; under mu
}

// fairness keeps one slow member cluster from holding every worker: once a
// member's key was queued, a key whose cluster already runs limit
// reconciles is set aside, and queued again (with its causes) when one of
// them ends. The other clusters always have workers - limit workers.
type fairness struct {
	limit   int
	fleet   atomic.Bool      // a key of a member cluster was queued
	members func() int       // how many member clusters are engaged
	running map[string]int   // keys handed out and not done, per cluster
	aside   map[Key]queued   // keys set aside, with what the queue knew of them
	order   map[string][]Key // keys set aside per cluster, oldest first
}

func (s *fairness) capped() bool { return s.fleet.Load() && s.members() > 0 }

type delayed struct {
	at     time.Time
	reason Reason
}

// batch is keys that entered the backlog together; self: each caused by its own object.
type batch struct {
	keys  []Key
	cause Cause
	self  bool
}

// backlogWindow is how many keys the queue holds before the backlog waits.
const backlogWindow = 128

func newQueue(name string, workers int, members func() int, limiter RateLimiter, provider workqueue.MetricsProvider, activity *atomic.Uint64) *queue {
	q := &queue{
		limiter:   limiter,
		conflicts: workqueue.NewTypedItemExponentialFailureRateLimiter[Key](5*time.Millisecond, 1000*time.Second),
		causes:    map[Key]*Causes{},
		due:       map[Key]delayed{},
		waiting:   map[Key]string{},
		released:  map[Key]time.Time{},
	}
	if workers > 1 {
		q.fair = &fairness{limit: workers - max(1, workers/4), members: members, running: map[string]int{},
			aside: map[Key]queued{}, order: map[string][]Key{}}
	}
	q.TypedDelayingInterface = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[Key]{
		Name:            name,
		MetricsProvider: counting{provider, &q.processing, activity, &q.depth},
	})
	return q
}

func (q *queue) add(key Key, cause Cause) {
	q.mu.Lock()
	q.noteLocked(key, cause)
	q.mu.Unlock()
	q.Add(key)
}

func (q *queue) noteLocked(key Key, cause Cause) {
	q.causesLocked(key).add(cause)
}

func (q *queue) causesLocked(key Key) *Causes {
	cs := q.causes[key]
	if cs == nil {
		cs = &Causes{}
		q.causes[key] = cs
		if q.fair != nil && key.Cluster != "" && !q.fair.fleet.Load() {
			q.fair.fleet.Store(true)
		}
	}
	return cs
}

// merge adds cs to the causes of key, for when it is next handed out.
func (q *queue) merge(key Key, cs *Causes) {
	q.mu.Lock()
	q.causesLocked(key).merge(cs)
	q.mu.Unlock()
}

func (q *queue) addBacklog(b batch) {
	if len(b.keys) == 0 {
		return
	}
	q.backlogMu.Lock()
	q.backlog = append(q.backlog, b)
	q.backlogLen.Add(int64(len(b.keys)))
	q.addDepth(len(b.keys))
	q.backlogMu.Unlock()
	q.refill()
}

// refill moves backlog keys into the queue while it holds fewer than
// backlogWindow, from every batch in turn (fair between lists). Workers
// call it before waiting, so a backlog never waits on an empty queue.
func (q *queue) refill() {
	if q.backlogLen.Load() == 0 {
		return
	}
	q.backlogMu.Lock()
	defer q.backlogMu.Unlock()
	room := backlogWindow - q.Len()
	moved := 0
	for room > 0 && len(q.backlog) > 0 {
		share := max(1, room/len(q.backlog))
		for i := 0; i < len(q.backlog) && room > 0; {
			b := &q.backlog[i]
			n := min(len(b.keys), share, room)
			q.mu.Lock()
			for _, k := range b.keys[:n] {
				c := b.cause
				if b.self {
					c.Object = k
				}
				q.noteLocked(k, c)
			}
			q.mu.Unlock()
			for _, k := range b.keys[:n] {
				q.Add(k)
			}
			clear(b.keys[:n])
			b.keys = b.keys[n:]
			room -= n
			moved += n
			if len(b.keys) == 0 {
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

func (q *queue) addDepth(n int) {
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

func (q *queue) addAfter(key Key, d time.Duration, reason Reason) {
	if d <= 0 {
		q.add(key, Cause{Reason: reason})
		return
	}
	at := time.Now().Add(d)
	q.mu.Lock()
	if cur, ok := q.due[key]; !ok || at.Before(cur.at) {
		q.due[key] = delayed{at, reason}
	}
	q.mu.Unlock()
	q.AddAfter(key, d)
}

func (q *queue) retry(key Key) { q.addAfter(key, q.limiter.When(key), ReasonRetry) }

// retryConflict adds key after its own backoff, spending no shared budget.
func (q *queue) retryConflict(key Key) { q.addAfter(key, q.conflicts.When(key), ReasonRetry) }

func (q *queue) forget(key Key) {
	q.limiter.Forget(key)
	q.conflicts.Forget(key)
}

type queued struct {
	causes   *Causes
	released time.Time // when the server's return released it, if it did
}

// get hands out the next key and what the queue knows of it (a due delayed
// key's reason joins its causes), skipping keys fairness sets aside. Every
// key handed out is given back with done.
func (q *queue) get() (Key, queued, bool) {
	for {
		q.refill()
		key, shutdown := q.Get()
		if shutdown {
			return key, queued{}, true
		}
		fair := q.fair
		if fair != nil && !fair.fleet.Load() {
			fair = nil // one cluster: nothing to share, nothing to count
		}
		capped := fair != nil && fair.capped()
		q.mu.Lock()
		it := queued{causes: q.causes[key]}
		delete(q.causes, key)
		if it.causes == nil {
			it.causes = &Causes{}
		}
		if d, ok := q.due[key]; ok && !time.Now().Before(d.at) {
			delete(q.due, key)
			it.causes.add(Cause{Reason: d.reason})
		}
		if at, ok := q.released[key]; ok {
			delete(q.released, key)
			it.released = at
		}
		if s := fair; s != nil {
			if aside, ok := s.aside[key]; ok { // queued again while set aside
				aside.merge(it)
				s.aside[key] = aside
				q.mu.Unlock()
				q.Done(key)
				continue
			}
			if capped && it.causes.Total > 0 && s.running[key.Cluster] >= s.limit {
				s.aside[key] = it
				s.order[key.Cluster] = append(s.order[key.Cluster], key)
				q.mu.Unlock()
				q.addDepth(1)
				q.Done(key)
				continue
			}
			s.running[key.Cluster]++
		}
		q.mu.Unlock()
		return key, it, false
	}
}

// done gives back a key; keys set aside are queued first, so none waits on an empty queue.
func (q *queue) done(key Key) {
	// Until a member's key was queued nothing is counted (fleet never goes
	// back); keys handed out before then count their cluster low, briefly.
	if s := q.fair; s != nil && s.fleet.Load() {
		var back []Key
		capped := s.capped()
		q.mu.Lock()
		if s.running[key.Cluster]--; s.running[key.Cluster] <= 0 {
			delete(s.running, key.Cluster)
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
			q.Add(k)
		}
	}
	q.Done(key)
}

func (q *queue) restoreLocked(key Key, it queued) {
	cs := q.causesLocked(key)
	cs.merge(it.causes)
	if !it.released.IsZero() {
		if at, ok := q.released[key]; !ok || it.released.Before(at) {
			q.released[key] = it.released
		}
	}
}

func (q *queue) asideLen() int {
	if q.fair == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.fair.aside)
}

func (it *queued) merge(later queued) {
	it.causes.merge(later.causes)
	if it.released.IsZero() {
		it.released = later.released
	}
}

func (q *queue) dueAt(key Key) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.due[key]
	return d.at, ok
}

func (q *queue) dueWithin(d time.Duration) bool {
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
