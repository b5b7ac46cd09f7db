package ctrl

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// RateLimiter decides how long a key waits before it is retried after an
// error. It is client-go's workqueue rate limiter over [Key]; any of
// client-go's limiters (workqueue.NewTypedItemExponentialFailureRateLimiter,
// workqueue.NewTypedMaxOfRateLimiter, ...) can be used.
type RateLimiter = workqueue.TypedRateLimiter[Key]

// DefaultRateLimiter returns the limiter controllers use unless
// ControllerOptions.RateLimiter is set, the same as controller-runtime's:
// the larger of a per-key exponential backoff from 5 ms to 1000 s and an
// overall token bucket of 10 retries per second with a burst of 100.
func DefaultRateLimiter() RateLimiter {
	return workqueue.DefaultTypedControllerRateLimiter[Key]()
}

// queue is a controller's work queue: client-go's delaying workqueue of
// keys, which de-duplicates keys and never hands the same key to two workers
// at once, plus the bookkeeping the idle check needs: how many keys are
// being processed, and when the earliest delayed key is due.
type queue struct {
	workqueue.TypedDelayingInterface[Key]
	limiter RateLimiter

	// processing counts keys handed out by Get and not yet Done. It changes
	// inside the workqueue's lock, together with the queue itself (see
	// counting), so Len() == 0 && processing == 0 is exact.
	processing atomic.Int64

	mu  sync.Mutex
	due map[Key]time.Time // delayed keys not yet handed out; earliest time per key

	// The backlog holds the keys of objects that a list added (the initial
	// list above all) until the queue has room for them: at most
	// backlogWindow keys wait in the queue, and the rest come in as workers
	// take keys. Changes that arrive meanwhile go straight into the queue,
	// so they are served before the rest of the list, and the workqueue's
	// own sets and maps, which never shrink, stay the size of the window
	// instead of growing to the size of the list. workqueue_depth counts
	// the backlog too; workqueue_queue_duration_seconds starts when a key
	// enters the queue proper.
	backlogMu  sync.Mutex
	backlog    []Key
	backlogLen atomic.Int64 // len(backlog), stored after its keys are in the queue
	depth      workqueue.GaugeMetric
}

// backlogWindow is how many keys the queue holds before the backlog waits.
const backlogWindow = 128

func newQueue(name string, limiter RateLimiter, provider workqueue.MetricsProvider, activity *atomic.Uint64) *queue {
	q := &queue{limiter: limiter, due: map[Key]time.Time{}}
	q.TypedDelayingInterface = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[Key]{
		Name:            name,
		MetricsProvider: counting{provider, &q.processing, activity, &q.depth},
	})
	return q
}

// addBacklog adds keys to the backlog, and as many to the queue as fit.
func (q *queue) addBacklog(keys []Key) {
	if len(keys) == 0 {
		return
	}
	q.backlogMu.Lock()
	if len(q.backlog) == 0 {
		q.backlog = keys
	} else {
		q.backlog = append(q.backlog, keys...)
	}
	q.backlogLen.Store(int64(len(q.backlog)))
	q.addDepth(len(keys))
	q.backlogMu.Unlock()
	q.feed()
}

// feed moves keys from the backlog into the queue while it holds fewer than
// backlogWindow. Workers call it before they wait for a key, so a backlog
// never waits on an empty queue.
func (q *queue) feed() {
	if q.backlogLen.Load() == 0 {
		return
	}
	q.backlogMu.Lock()
	defer q.backlogMu.Unlock()
	n := min(len(q.backlog), backlogWindow-q.Len())
	if n <= 0 {
		return
	}
	for _, k := range q.backlog[:n] {
		q.Add(k)
	}
	q.addDepth(-n) // the queue counted those it did not already hold
	clear(q.backlog[:n])
	q.backlog = q.backlog[n:]
	if len(q.backlog) == 0 {
		q.backlog = nil // let the list's array go
	}
	q.backlogLen.Store(int64(len(q.backlog)))
}

// addDepth changes workqueue_depth by n, when the metric can.
func (q *queue) addDepth(n int) {
	if g, ok := q.depth.(interface{ Add(float64) }); ok {
		g.Add(float64(n))
	}
}

// counting wraps the queue's metrics to count keys in processing. The
// workqueue observes the queue latency of a key when Get hands it out and
// the work duration when Done is called, both under its lock: the one place
// where taking a key out of the queue and counting it are one step.
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

// addAfter adds key once d has passed.
func (q *queue) addAfter(key Key, d time.Duration) {
	if d > 0 {
		at := time.Now().Add(d)
		q.mu.Lock()
		if cur, ok := q.due[key]; !ok || at.Before(cur) {
			q.due[key] = at
		}
		q.mu.Unlock()
	}
	q.AddAfter(key, d)
}

// addRateLimited adds key after the limiter's delay for it.
func (q *queue) addRateLimited(key Key) { q.addAfter(key, q.limiter.When(key)) }

// forget clears the key's retry history.
func (q *queue) forget(key Key) { q.limiter.Forget(key) }

// get hands out the next key. A delayed key handed out at or after its due
// time has been delivered, so its due entry is dropped.
func (q *queue) get() (Key, bool) {
	q.feed()
	key, shutdown := q.Get()
	if shutdown {
		return key, true
	}
	q.mu.Lock()
	if at, ok := q.due[key]; ok && !time.Now().Before(at) {
		delete(q.due, key)
	}
	q.mu.Unlock()
	return key, false
}

// dueWithin reports whether a delayed key is due within d from now.
func (q *queue) dueWithin(d time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	limit := time.Now().Add(d)
	for _, at := range q.due {
		if at.Before(limit) {
			return true
		}
	}
	return false
}
