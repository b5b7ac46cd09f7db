// Package webhook serves ctrl's admission and conversion webhooks: it
// routes the API server's reviews by path, decodes them into the user's Go
// types, runs the user's functions bounded by the request's timeout and
// safe from their panics, and encodes the answers, patches included.
//
// Every request gets an answer: a review that cannot be read is answered
// 400 with a text message, and everything after that, including a panic or
// an overrun in a user's function, is a denial inside a well-formed review,
// so the API server reports the reason to the user instead of a failed
// call.
package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/typedctrl/ctrl/internal/metrics"
)

// maxBody bounds a request's body, as controller-runtime's 7 MiB: etcd
// stores objects of up to 1.5 MiB, and an update review carries two.
const maxBody = 7 << 20

// defaultTimeout bounds a request that does not say its timeout: the
// longest timeout the API server allows a webhook.
const defaultTimeout = 30 * time.Second

// Server routes webhook requests by path. Registration is safe while it
// serves: routes are replaced, never changed, so serving takes no lock.
type Server struct {
	log     logr.Logger
	metrics *metrics.Webhooks

	mu     sync.Mutex // serializes registrations
	routes atomic.Pointer[map[string]*route]
	hooks  []Hook
	conv   *Converter
}

// Hook is a registered admission webhook, what its configuration needs.
type Hook struct {
	Path       string
	Name       string // in its configuration
	Mutating   bool
	Group      string
	Version    string
	Resource   string
	Namespaced bool
	Operations []string // "CREATE", "UPDATE", "DELETE"
}

// reviewer answers the reviews sent to one path.
type reviewer interface {
	// review answers the review in body. An error means body is not a
	// review this path answers; it is answered 400.
	review(ctx context.Context, body []byte, log logr.Logger, m metrics.Webhook) ([]byte, error)
}

type route struct {
	r       reviewer
	log     logr.Logger
	metrics metrics.Webhook
}

// New returns a server with no webhooks that logs to log and counts in m.
func New(log logr.Logger, m *metrics.Webhooks) *Server {
	s := &Server{log: log, metrics: m}
	s.routes.Store(&map[string]*route{})
	return s
}

// handle serves r at path. Called with s.mu held.
func (s *Server) handle(path string, r reviewer) {
	routes := map[string]*route{}
	for p, rt := range *s.routes.Load() {
		routes[p] = rt
	}
	routes[path] = &route{r: r, log: s.log.WithValues("webhook", path), metrics: s.metrics.Webhook(path)}
	s.routes.Store(&routes)
}

// Paths returns the paths of the registered webhooks, sorted.
func (s *Server) Paths() []string {
	return slices.Sorted(maps.Keys(*s.routes.Load()))
}

// Empty reports whether no webhook is registered.
func (s *Server) Empty() bool { return len(*s.routes.Load()) == 0 }

// Hooks returns the registered admission webhooks in registration order.
func (s *Server) Hooks() []Hook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Hook(nil), s.hooks...)
}

// ServeHTTP answers a webhook request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := (*s.routes.Load())[r.URL.Path]
	if rt == nil {
		msg := fmt.Sprintf("no webhook is registered at %s", r.URL.Path)
		s.log.Error(nil, "rejecting a webhook request", "code", http.StatusNotFound, "reason", msg)
		http.Error(w, msg, http.StatusNotFound)
		return
	}
	began := time.Now()
	rt.metrics.InFlight.Inc()
	code := rt.serve(w, r)
	rt.metrics.InFlight.Dec()
	rt.metrics.Latency.Observe(time.Since(began).Seconds())
	rt.metrics.Served(code)
}

// serve answers r and returns the HTTP status code it wrote.
func (rt *route) serve(w http.ResponseWriter, r *http.Request) int {
	fail := func(code int, msg string) int {
		rt.log.Error(nil, "rejecting a webhook request", "code", code, "reason", msg)
		http.Error(w, msg, code)
		return code
	}
	if r.Method != http.MethodPost {
		return fail(http.StatusMethodNotAllowed, fmt.Sprintf("method %s: webhooks take POST", r.Method))
	}
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(ct) != "application/json" {
		return fail(http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: webhooks take application/json", ct))
	}
	body, err := readBody(r)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error())
	}
	timeout := defaultTimeout
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return fail(http.StatusBadRequest, fmt.Sprintf("timeout %q: not a positive duration", t))
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	out, err := rt.r.review(ctx, body, rt.log, rt.metrics)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out) // a failed write is the client's going away
	return http.StatusOK
}

// readBody reads a request's body up to maxBody, holding memory for the
// bytes that came (twice as many at most, as the buffer doubles), never
// for what Content-Length declares: a client may declare 7 MiB and send
// nothing until the server's read timeout.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > maxBody {
		return nil, fmt.Errorf("request body of %d bytes is over the limit of %d", r.ContentLength, maxBody)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(io.LimitReader(r.Body, maxBody+1)); err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	switch {
	case body.Len() > maxBody:
		return nil, fmt.Errorf("request body is over the limit of %d bytes", maxBody)
	case body.Len() == 0:
		return nil, fmt.Errorf("request body is empty")
	}
	return body.Bytes(), nil
}

// panicError is a panic in a user's function.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v [recovered]", e.value) }

// call runs f in a goroutine of its own, so that a function that overruns
// the request's deadline does not hold the request: when ctx ends first,
// call returns ctx's error and f runs on unobserved. A panic in f is
// returned as a *panicError.
func call(ctx context.Context, f func(context.Context) error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- &panicError{value: r, stack: debug.Stack()}
			}
		}()
		done <- f(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
