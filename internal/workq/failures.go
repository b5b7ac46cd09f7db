package workq

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Failures remember the last error of each key awaiting a retry; keys
// leave once done, so they are bounded by the objects. The zero value is
// empty; they are safe for concurrent use.
type Failures[K comparable] struct {
	n  atomic.Int32 // len(m), read without the lock on every success
	mu sync.Mutex
	m  map[K]Failure[K]
}

// Failure is a key's last error, and how many times in a row it failed.
type Failure[K comparable] struct {
	Key      K
	Err      error
	Attempts int
}

// Failed records err as key's last error.
func (f *Failures[K]) Failed(key K, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[K]Failure[K]{}
	}
	f.m[key] = Failure[K]{Key: key, Err: err, Attempts: f.m[key].Attempts + 1}
	f.n.Store(int32(len(f.m)))
}

// Done forgets key's failures.
func (f *Failures[K]) Done(key K) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
	f.n.Store(int32(len(f.m)))
}

// Forget forgets the failures of the keys match matches.
func (f *Failures[K]) Forget(match func(K) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.m {
		if match(k) {
			delete(f.m, k)
		}
	}
	f.n.Store(int32(len(f.m)))
}

// Sorted returns the failures, sorted by key with cmp.
func (f *Failures[K]) Sorted(cmp func(a, b K) int) []Failure[K] {
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	out := make([]Failure[K], 0, len(f.m))
	for _, v := range f.m {
		out = append(out, v)
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b Failure[K]) int { return cmp(a.Key, b.Key) })
	return out
}

// RetryDue says when key's delayed add is due, for a report of a failing
// key: ", next retry in 1.2s"; ", retry overdue by 3ms" once due and not yet
// handed out (every worker busy); "" if none is.
func (q *Queue[K, C, E]) RetryDue(key K) string {
	at, ok := q.DueAt(key)
	switch d := time.Until(at); {
	case !ok:
		return ""
	case d < 0:
		return fmt.Sprintf(", retry overdue by %s", (-d).Round(time.Millisecond))
	default:
		return fmt.Sprintf(", next retry in %s", d.Round(time.Millisecond))
	}
}
