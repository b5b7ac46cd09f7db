// Package serve runs the manager's HTTP endpoints (metrics, health, pprof
// and webhooks), each on a listener of its own. Every address is bound by
// [Listen], before anything is served, so that a taken port fails the
// manager's start rather than becoming a log line.
package serve

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// Config says what to serve where. An empty address leaves its endpoint
// off.
type Config struct {
	// Log receives the servers' error logs, at V(1).
	Log logr.Logger
	// TLS configures the metrics and webhook servers.
	TLS TLS
	// Metrics is the metrics endpoint.
	Metrics Metrics
	// HealthAddress serves /healthz and /readyz.
	HealthAddress string
	// Ready says what /readyz answers.
	Ready func() Readiness
	// PprofAddress serves Go's profiles at /debug/pprof/.
	PprofAddress string
	// Webhook is the webhook endpoint.
	Webhook Webhook
}

// Webhook is where and how the webhooks are served.
type Webhook struct {
	// Address is where to listen; "" is off.
	Address string
	// Handler serves the webhooks.
	Handler http.Handler
	// CertDir holds the serving certificate and key, read again when they
	// change; "" is $TMPDIR/k8s-webhook-server/serving-certs,
	// controller-runtime's.
	CertDir string
}

// Addresses are the bound addresses of the endpoints, "" for one that is
// off.
type Addresses struct {
	Metrics, Health, Pprof, Webhook string
}

// Servers are the bound endpoints. Call Serve once, then Shutdown.
type Servers struct {
	endpoints []endpoint
	addresses Addresses
	wg        sync.WaitGroup
}

type endpoint struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds every configured address and reads the serving
// certificates. On error, nothing stays bound.
func Listen(cfg Config) (*Servers, error) {
	s := &Servers{}
	add := func(addr string, bound *string, h http.Handler, tlsConfig *tls.Config) error {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		if tlsConfig != nil {
			ln = tls.NewListener(ln, tlsConfig)
		}
		// The limits README.md#admission-and-conversion-webhooks states;
		// the webhook server bounds a body's size itself.
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      2 * time.Minute, // pprof profiles take 30 s by default
			IdleTimeout:       2 * time.Minute,
			BaseContext:       func(net.Listener) context.Context { return context.Background() },
			// Failed TLS handshakes and the like: detail, not news.
			ErrorLog: log.New(logWriter{cfg.Log.V(1).WithValues("address", addr)}, "", 0),
		}
		srv.Addr = ln.Addr().String()
		*bound = srv.Addr
		s.endpoints = append(s.endpoints, endpoint{srv, ln})
		return nil
	}
	var err error
	if a := cfg.Metrics.Address; a != "" {
		var h http.Handler
		var c *tls.Config
		if h, c, err = metricsHandler(cfg.Metrics, cfg.TLS, cfg.Log); err == nil {
			err = add(a, &s.addresses.Metrics, h, c)
		}
	}
	if err == nil {
		err = add(cfg.HealthAddress, &s.addresses.Health, s.healthHandler(cfg.Ready, cfg.Webhook.Address != ""), nil)
	}
	if err == nil {
		err = add(cfg.PprofAddress, &s.addresses.Pprof, pprofHandler(), nil)
	}
	if w := cfg.Webhook; err == nil && w.Address != "" {
		var certs *webhook.Certs
		dir := cmp.Or(w.CertDir, filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"))
		if certs, err = webhook.LoadCerts(dir); err != nil {
			err = fmt.Errorf("webhooks: %w", err)
		} else {
			err = add(w.Address, &s.addresses.Webhook, w.Handler, cfg.TLS.config(certs.GetCertificate))
		}
	}
	if err != nil {
		for _, e := range s.endpoints {
			e.ln.Close()
		}
		return nil, err
	}
	return s, nil
}

// Addresses returns the bound addresses.
func (s *Servers) Addresses() Addresses { return s.addresses }

// Serve serves every endpoint in a goroutine of its own and returns; a
// server that fails calls fail.
func (s *Servers) Serve(fail func(error)) {
	for _, e := range s.endpoints {
		s.wg.Go(func() {
			if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("serving on %s: %w", e.srv.Addr, err))
			}
		})
	}
}

// Shutdown stops the servers, waiting up to 5 s each for requests in
// flight, and returns once they have stopped.
func (s *Servers) Shutdown() {
	for _, e := range s.endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.srv.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
}

// logWriter turns the lines of an http.Server's error log into log lines.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
