package ctrl

import (
	"context"
	"slices"
	"time"

	"github.com/typedctrl/ctrl/internal/probe"
)

// waitForServer parks key until cluster's server answers again (Resilient);
// only the manager's own requests, tagged with their cluster, signal one.
func (c *Controller[T]) waitForServer(key Key, cluster string, err error) {
	if n, summarize := c.outage.Add(); summarize {
		log := c.log
		if cluster != "" {
			log = log.WithValues("cluster", cluster)
		}
		log.Info("reconciles are failing because the API server is unreachable; retrying once it answers",
			"failures", n, "lastError", err.Error())
	}
	if c.q.WaitForServer(key, cluster) {
		c.metrics.Waiting.Inc()
	}
	c.mgr.awaitServer()
}

// releaseWaiting spreads cluster's keys over a second per thousand, two at most.
func (c *Controller[T]) releaseWaiting(cluster string) {
	n := c.q.WaitingFor(cluster)
	if n == 0 {
		return
	}
	window := min(max(time.Duration(n)*time.Millisecond, 100*time.Millisecond), 2*time.Second)
	released := c.q.Release(cluster, window)
	c.metrics.Waiting.Sub(float64(released))
	c.metrics.Released.Add(float64(released))
	c.log.V(1).Info("the API server answers again; retrying the keys that waited for it", "cluster", cluster, "keys", released, "window", window)
}

// awaitServer starts the probe, for outages that no watch noticed.
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
