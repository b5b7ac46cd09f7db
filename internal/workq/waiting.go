package workq

import (
	"math/rand/v2"
	"slices"
	"time"
)

// WaitForServer parks key until [Queue.Release] for cluster, outside its
// backoff and the retry budget. It reports whether key was not already waiting.
func (q *Queue[K, C, E]) WaitForServer(key K, cluster string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, was := q.waiting[key]
	q.waiting[key] = cluster
	return !was
}

// Release queues the keys waiting for cluster's server, each after a
// random delay within window, so a fleet does not retry in lockstep. It
// returns how many it released.
func (q *Queue[K, C, E]) Release(cluster string, window time.Duration) int {
	type retry struct {
		key K
		d   time.Duration
	}
	// Due before it stops waiting: the idle check always sees it somewhere.
	q.mu.Lock()
	retries := make([]retry, 0, len(q.waiting))
	now := time.Now()
	for k, waited := range q.waiting {
		if waited != cluster {
			continue
		}
		d := rand.N(window + 1)
		retries = append(retries, retry{k, d})
		q.released[k] = now
		if cur, ok := q.due[k]; !ok || now.Add(d).Before(cur.at) {
			q.due[k] = delayed[C]{now.Add(d), q.cfg.Retry}
		}
		delete(q.waiting, k)
	}
	q.mu.Unlock()
	for _, r := range retries {
		q.wq.AddAfter(r.key, r.d)
	}
	return len(retries)
}

// DropWaiting forgets the waiting keys of cluster, a member that left, and
// returns how many.
func (q *Queue[K, C, E]) DropWaiting(cluster string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for k := range q.waiting {
		if q.cfg.Cluster(k) == cluster {
			delete(q.waiting, k)
			n++
		}
	}
	return n
}

// WaitingLen returns how many keys wait for a server.
func (q *Queue[K, C, E]) WaitingLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// WaitingFor returns how many keys wait for the server of cluster.
func (q *Queue[K, C, E]) WaitingFor(cluster string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, waited := range q.waiting {
		if waited == cluster {
			n++
		}
	}
	return n
}

// WaitingClusters returns the clusters whose servers keys wait for.
func (q *Queue[K, C, E]) WaitingClusters() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, waited := range q.waiting {
		if !slices.Contains(out, waited) {
			out = append(out, waited)
		}
	}
	return out
}
