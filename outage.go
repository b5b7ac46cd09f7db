package ctrl

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// An outage of an API server is not an object's failure: a reconcile that
// fails because its requests to the API server got no answer waits for
// the server instead of spending its backoff and the shared retry budget.
// Only this manager's own requests to a cluster's API server can say so:
// they are tagged where they are made (Client's requests), with the
// cluster they went to. Any other error, such as a call to an outside
// service that failed to connect, is an ordinary failure, retried with
// backoff, whatever its type.

// unreachableError is the error of a request to the API server of cluster
// that got no answer: the connection failed or died, or the server said
// it cannot serve now (503, 504).
type unreachableError struct {
	cluster string
	err     error
}

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// tagUnreachable returns err, the outcome of a request of ctx to the API
// server of cluster, tagged if it means the server could not be reached.
// A context that ended (a deadline of the caller's own, or a shutdown) is
// the caller's doing, not the server's; a deadline that passed while ctx
// is alive is the HTTP client's own timeout: the server did not answer.
func tagUnreachable(ctx context.Context, cluster string, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var tagged *unreachableError
	if errors.As(err, &tagged) {
		return err
	}
	var status apierrors.APIStatus
	var ne net.Error
	switch {
	case errors.Is(err, ErrLeadershipLost):
		return err // refused before it left (see fence): no server was asked
	case errors.As(err, &status):
		if !apierrors.IsServiceUnavailable(err) && !apierrors.IsTimeout(err) {
			return err
		}
	case errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &ne), utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err),
		utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err):
	default:
		return err
	}
	return &unreachableError{cluster, err}
}

// serverUnreachable reports whether err, or an error it wraps, is a
// request of this manager that could not reach an API server, and whose.
func serverUnreachable(err error) (cluster string, ok bool) {
	var u *unreachableError
	if errors.As(err, &u) {
		return u.cluster, true
	}
	return "", false
}

// outageLog summarizes the reconciles of a controller that fail because
// the API server is unreachable: an outage fails every reconcile, and a line
// each would bury the logs.
type outageLog struct {
	mu     sync.Mutex
	count  int       // failures since the last summary
	logged time.Time // when the last summary was logged
}

// outageSummaryEvery spaces out the summaries.
const outageSummaryEvery = 10 * time.Second

// waitForServer parks key until the API server of cluster, which its
// reconcile could not reach, answers again: an outage is not the object's
// failure, so neither the key's backoff nor the shared retry budget is
// touched. The manager releases the keys waiting for a cluster when a
// cache's watch of it comes back or its probe gets an answer.
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

// releaseWaiting queues the keys of cluster waiting for its server, spread
// over a window that grows with their number: up to a second for a
// thousand keys, two at most.
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

// serverProbe runs while keys wait for an API server and no cache has
// reported it back: it asks each such server's /readyz every half second
// or so.
type serverProbe struct {
	mu      sync.Mutex
	running bool
}

// awaitServer makes sure something will tell the waiting keys that the
// server is back: a cache's watch reconnecting does, and the probe covers
// the case where no watch broke.
func (m *Manager) awaitServer() {
	m.probe.mu.Lock()
	defer m.probe.mu.Unlock()
	m.mu.Lock()
	ctx := m.running
	m.mu.Unlock()
	if m.probe.running || ctx == nil {
		return
	}
	m.probe.running = true
	m.wg.Go(func() { m.probeServer(ctx) })
}

// serverAnswered releases every controller's keys waiting for cluster's
// API server.
func (m *Manager) serverAnswered(cluster string) {
	m.mu.Lock()
	ctrls := append([]managedController(nil), m.ctrlList...)
	m.mu.Unlock()
	for _, c := range ctrls {
		c.releaseWaiting(cluster)
	}
}

func (m *Manager) probeServer(ctx context.Context) {
	defer func() {
		m.probe.mu.Lock()
		m.probe.running = false
		m.probe.mu.Unlock()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		t.Reset(250*time.Millisecond + rand.N(500*time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		clusters := m.clustersWaited()
		if len(clusters) == 0 {
			return
		}
		for _, cluster := range clusters {
			if m.serverReady(ctx, cluster) {
				m.serverAnswered(cluster)
			}
		}
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

// serverReady asks the /readyz of cluster's API server, which every
// authenticated client may read. Fakes are always ready; a member that
// left never is.
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
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return false
	}
	u.Path = "/readyz"
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
