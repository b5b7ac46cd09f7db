package ctrl

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// failures remembers the last error of each key awaiting a retry, for
// [Manager.WaitIdle]; keys leave once done, so it is bounded by the objects.
type failures struct {
	n  atomic.Int32 // len(keys), read without the lock on every success
	mu sync.Mutex
	m  map[Key]failure
}

type failure struct {
	err      error
	attempts int
}

func (f *failures) failed(key Key, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[Key]failure{}
	}
	prev := f.m[key]
	f.m[key] = failure{err: err, attempts: prev.attempts + 1}
	f.n.Store(int32(len(f.m)))
}

func (f *failures) ok(key Key) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
	f.n.Store(int32(len(f.m)))
}

func (f *failures) forgetCluster(cluster string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.m {
		if k.Cluster == cluster {
			delete(f.m, k)
		}
	}
	f.n.Store(int32(len(f.m)))
}

// maxFailuresShown bounds the keys an error of WaitIdle names per controller.
const maxFailuresShown = 5

// failing names the controller's failing keys, each with its last error.
func (c *Controller[T]) failing() error {
	f := &c.failures
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	type entry struct {
		key Key
		failure
	}
	entries := make([]entry, 0, len(f.m))
	for k, v := range f.m {
		entries = append(entries, entry{k, v})
	}
	f.mu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.key.Cluster, b.key.Cluster), cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.Name, b.key.Name))
	})
	var errs []error
	for i, e := range entries {
		if i == maxFailuresShown {
			errs = append(errs, fmt.Errorf("%s: and %d more keys", c, len(entries)-i))
			break
		}
		retry := ""
		if at, ok := c.q.DueAt(e.key); ok {
			retry = fmt.Sprintf(", next retry in %s", time.Until(at).Round(time.Millisecond))
		}
		errs = append(errs, fmt.Errorf("%s: %s failed %d times%s: %w", c, e.key, e.attempts, retry, e.err))
	}
	return errors.Join(errs...)
}
