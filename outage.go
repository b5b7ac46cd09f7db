package ctrl

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/typedctrl/ctrl/internal/probe"
)

// outageLog summarizes outage failures: a line each would bury the logs.
type outageLog struct {
	mu     sync.Mutex
	count  int       // failures since the last summary
	logged time.Time // when the last summary was logged
}

// outageSummaryEvery spaces out the summaries.
const outageSummaryEvery = 10 * time.Second

// waitForServer parks key until cluster's server answers again, outside
// its backoff and the retry budget (the Resilient guarantee). Only the
// manager's own requests, tagged with their cluster, signal an outage.
func (c *Controller[T]) waitForServer(key Key, cluster string, err error) {
	c.outage.mu.Lock()
	c.outage.count++
	n, summarize := c.outage.count, time.Since(c.outage.logged) >= outageSummaryEvery
	if summarize {
		c.outage.count, c.outage.logged = 0, time.Now()
	}
	c.outage.mu.Unlock()
	if summarize {
		log := c.log
		if cluster != "" {
			log = log.WithValues("cluster", cluster)
		}
		log.Info("reconciles are failing because the API server is unreachable; retrying once it answers",
			"failures", n, "lastError", err.Error())
	}
	if c.q.waitForServer(key, cluster) {
		c.metrics.Waiting.Inc()
	}
	c.mgr.awaitServer()
}

// releaseWaiting spreads cluster's keys over a second per thousand, two at most.
func (c *Controller[T]) releaseWaiting(cluster string) {
	n := c.q.waitingFor(cluster)
	if n == 0 {
		return
	}
	window := min(max(time.Duration(n)*time.Millisecond, 100*time.Millisecond), 2*time.Second)
	released := c.q.release(cluster, window)
	c.metrics.Waiting.Sub(float64(released))
	c.metrics.Released.Add(float64(released))
	c.log.V(1).Info("the API server answers again; retrying the keys that waited for it", "cluster", cluster, "keys", released, "window", window)
}

// waitForServer reports whether key was not already waiting; see release.
func (q *queue) waitForServer(key Key, cluster string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, was := q.waiting[key]
	q.waiting[key] = cluster
	return !was
}

// release queues the keys waiting for cluster's server, each after a
// random delay within window, so a fleet does not retry in lockstep. It
// returns how many it released.
func (q *queue) release(cluster string, window time.Duration) int {
	type retry struct {
		key Key
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
			q.due[k] = delayed{now.Add(d), ReasonRetry}
		}
		delete(q.waiting, k)
	}
	q.mu.Unlock()
	for _, r := range retries {
		q.AddAfter(r.key, r.d)
	}
	return len(retries)
}

// dropWaiting forgets the waiting keys of cluster, a member that left.
func (q *queue) dropWaiting(cluster string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for k := range q.waiting {
		if k.Cluster == cluster {
			delete(q.waiting, k)
			n++
		}
	}
	return n
}

// waitingLen returns how many keys wait for a server.
func (q *queue) waitingLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// waitingFor returns how many keys wait for the server of cluster.
func (q *queue) waitingFor(cluster string) int {
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

// waitingClusters returns the clusters whose servers keys wait for.
func (q *queue) waitingClusters() []string {
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

// awaitServer makes sure something tells the waiting keys the server is
// back: the probe, for when no watch broke.
func (m *Manager) awaitServer() {
	m.mu.Lock()
	ctx := m.running
	m.mu.Unlock()
	if ctx == nil {
		return
	}
	m.probe.Start(ctx, m.wg.Go, probe.Funcs{Waited: m.clustersWaited, Ready: m.serverReady, Answered: m.serverAnswered})
}

func (m *Manager) serverAnswered(cluster string) {
	m.mu.Lock()
	ctrls := append([]managedController(nil), m.ctrlList...)
	m.mu.Unlock()
	for _, c := range ctrls {
		c.releaseWaiting(cluster)
	}
}

// clustersWaited returns the clusters whose servers keys wait for.
func (m *Manager) clustersWaited() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.ctrlList {
		for _, cl := range c.waitingClusters() {
			if !slices.Contains(out, cl) {
				out = append(out, cl)
			}
		}
	}
	return out
}

// serverReady: fakes are always ready; a member that left never is.
func (m *Manager) serverReady(ctx context.Context, cluster string) bool {
	cfg, hc := m.clients.Config, m.clients.HTTP
	if cluster != "" {
		mb := m.memberOf(cluster)
		if mb == nil {
			return false
		}
		cfg, hc = mb.clients.Config, mb.clients.HTTP
	}
	if cfg == nil || hc == nil {
		return true
	}
	return probe.Ready(ctx, cfg, hc)
}
