package ctrl

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// servers are the manager's HTTP endpoints, each on its own listener.
type servers struct {
	endpoints []endpoint
	wg        sync.WaitGroup
}

type endpoint struct {
	srv *http.Server
	ln  net.Listener
}

// listen binds every configured address, so that a taken port is an error
// from Start rather than a log line.
func (m *Manager) listen() (*servers, error) {
	var out []endpoint
	add := func(addr string, bound *string, h http.Handler, wrap func(net.Listener) net.Listener) error {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("ctrl: Start: %w", err)
		}
		if wrap != nil {
			ln = wrap(ln)
		}
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      2 * time.Minute, // pprof profiles take 30 s by default
			IdleTimeout:       2 * time.Minute,
			BaseContext:       func(net.Listener) context.Context { return context.Background() },
			// Failed TLS handshakes and the like: detail, not news.
			ErrorLog: log.New(logWriter{m.log.V(1).WithValues("address", addr)}, "", 0),
		}
		srv.Addr = ln.Addr().String()
		m.mu.Lock()
		*bound = srv.Addr
		m.mu.Unlock()
		out = append(out, endpoint{srv, ln})
		return nil
	}
	gatherer, err := m.gatherer()
	if err == nil && m.opts.MetricsAddress != "" {
		var h http.Handler
		var wrap func(net.Listener) net.Listener
		if h, wrap, err = m.metricsEndpoint(gatherer); err == nil {
			err = add(m.opts.MetricsAddress, &m.addresses.Metrics, h, wrap)
		}
	}
	if err == nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", m.healthz)
		mux.HandleFunc("/readyz", m.readyz)
		err = add(m.opts.HealthAddress, &m.addresses.Health, mux, nil)
	}
	if err == nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		err = add(m.opts.PprofAddress, &m.addresses.Pprof, mux, nil)
	}
	if err == nil {
		addr, h, wrap, werr := m.webhookEndpoint()
		if err = werr; err == nil {
			err = add(addr, &m.addresses.Webhook, h, wrap)
		}
	}
	if err != nil {
		for _, e := range out {
			e.ln.Close()
		}
		return nil, err
	}
	return &servers{endpoints: out}, nil
}

func (m *Manager) gatherer() (prometheus.Gatherer, error) {
	if m.registry != nil {
		return m.registry, nil
	}
	if g, ok := m.opts.Registerer.(prometheus.Gatherer); ok {
		return g, nil
	}
	if m.opts.MetricsAddress == "" {
		return nil, nil
	}
	return nil, errors.New("ctrl: Start: Options.MetricsAddress needs an Options.Registerer that is also a prometheus.Gatherer")
}

// serve starts serving on the listeners; a server that fails is fatal.
func (s *servers) serve(m *Manager) {
	for _, e := range s.endpoints {
		s.wg.Go(func() {
			if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.fatal(fmt.Errorf("ctrl: serving on %s: %w", e.srv.Addr, err))
			}
		})
	}
}

// logWriter turns the lines of an http.Server's error log into log lines.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// shutdown stops the servers, waiting up to 5 s for requests in flight.
func (s *servers) shutdown() {
	for _, e := range s.endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.srv.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
}

// healthz reports that the process is alive.
func (m *Manager) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz reports ready once every cache has synced and none is forbidden
// to list or watch, and the webhook server, if any, completes a TLS
// handshake; otherwise it names each cache that is not ready, a line each,
// with why. A cache that synced stays ready while its watch reconnects
// after an API server outage: restarting the process would not bring the
// server back, and the cache resumes where it stopped. A required kind
// that the server stopped serving (its CustomResourceDefinition was
// deleted) is not ready: the manager cannot do its work. An optional kind
// that waits for its CRD is listed, and ready.
func (m *Manager) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	m.mu.Lock()
	caches := append([]managedCache(nil), m.cacheList...)
	m.mu.Unlock()
	var notReady, optional []string
	for _, c := range caches {
		if why := c.notReady(); why != "" {
			notReady = append(notReady, c.describe()+": "+why)
		}
		if line := c.waitingForCRD(); line != "" {
			optional = append(optional, line)
		}
	}
	if len(notReady) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready:\n%s\n", strings.Join(notReady, "\n"))
		return
	}
	if err := m.webhookReady(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "webhook server not serving: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
	if s := m.policy.State(); s != "" {
		fmt.Fprintln(w, s)
	}
	slices.Sort(optional)
	for _, line := range optional {
		fmt.Fprintln(w, line)
	}
	// A cache that lists by watching works without the list permission,
	// until it must fall back to listing: reported, not a reason to
	// restart the process.
	for _, c := range caches {
		if warn := c.warning(); warn != "" {
			fmt.Fprintf(w, "%s: %s\n", c.describe(), warn)
		}
	}
	// Members of a fleet come and go; one that is down is reported, not a
	// reason to restart the process.
	m.mu.Lock()
	fleet := slices.Clone(m.fleetCaches)
	m.mu.Unlock()
	for _, fc := range fleet {
		for _, line := range fc.memberStates() {
			fmt.Fprintln(w, line)
		}
	}
}

// Addresses are the addresses the manager's HTTP endpoints listen on, with
// their ports resolved ("127.0.0.1:0" becomes "127.0.0.1:41235"). An
// endpoint that is off, or not bound yet, is "".
type Addresses struct {
	Metrics string // Options.MetricsAddress
	Health  string // Options.HealthAddress
	Pprof   string // Options.PprofAddress
	Webhook string // Options.WebhookAddress
}

// Addresses returns where the manager's HTTP endpoints listen. Start binds
// them before it waits for the caches, so they are known as soon as the
// health endpoint answers.
func (m *Manager) Addresses() Addresses {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addresses
}
