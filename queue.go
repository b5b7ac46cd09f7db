package ctrl

import (
	"sync/atomic"

	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl/internal/workq"
)

// RateLimiter decides how long a key waits before a retry after an error: any of
// client-go's typed workqueue rate limiters over [Key].
type RateLimiter = workqueue.TypedRateLimiter[Key]

// DefaultRateLimiter returns the limiter controllers use unless
// ControllerOptions.RateLimiter is set, controller-runtime's: the larger of
// a per-key exponential backoff from 5 ms to 1000 s and a token bucket of
// 10 retries per second, burst 100. Outage failures skip it and conflicts
// get the backoff alone (docs/why.md#retries).
func DefaultRateLimiter() RateLimiter {
	return workqueue.DefaultTypedControllerRateLimiter[Key]()
}

// The controller's work queue, and what goes in and comes out; see package workq.
type (
	queue  = workq.Queue[Key, Cause, Causes]
	batch  = workq.Batch[Key, Cause]
	queued = workq.Item[Causes]
)

func newQueue(name string, workers int, members func() int, limiter RateLimiter, provider workqueue.MetricsProvider, activity *atomic.Uint64) *queue {
	return workq.New(workq.Config[Key, Cause, Causes]{
		Name: name, Workers: workers, Members: members, Limiter: limiter, Metrics: provider, Activity: activity,
		Cluster: func(k Key) string { return k.Cluster },
		Note:    (*Causes).add,
		Merge:   (*Causes).merge,
		Count:   func(cs *Causes) int { return cs.Total },
		Self:    func(c Cause, k Key) Cause { c.Object = k; return c },
		Retry:   Cause{Trigger: TriggerRetry},
	})
}
