package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// healthHandler serves /healthz, which says the process is alive, and
// /readyz, which says what ready says and, with a webhook server, that it
// completes a TLS handshake.
func (s *Servers) healthHandler(ready func() (bool, string), webhook bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, body := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, body)
			return
		}
		if webhook {
			if err := handshake(r.Context(), s.addresses.Webhook); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "webhook server not serving: %v\n", err)
				return
			}
		}
		fmt.Fprint(w, body)
	})
	return mux
}

// Readiness is what /readyz reports of a manager.
type Readiness struct {
	NotReady []string // why it is not ready: caches not synced, or forbidden
	State    string   // its policy's line, or ""
	Waiting  []string // optional kinds waiting for their CRD, in any order
	Notes    []string // reported only: warnings, members that are down
}

// Body returns whether r is ready, and the text of /readyz: the reasons it
// is not, or "ok" and the rest.
func (r Readiness) Body() (bool, string) {
	if len(r.NotReady) > 0 {
		return false, fmt.Sprintf("not ready:\n%s\n", strings.Join(r.NotReady, "\n"))
	}
	var w strings.Builder
	fmt.Fprintln(&w, "ok")
	if r.State != "" {
		fmt.Fprintln(&w, r.State)
	}
	for _, line := range slices.Concat(slices.Sorted(slices.Values(r.Waiting)), r.Notes) {
		fmt.Fprintln(&w, line)
	}
	return true, w.String()
}

// handshake reports whether a TLS handshake with addr completes, as
// controller-runtime's readiness check does: listening is not enough if
// the certificate cannot be served.
func handshake(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// Only the handshake matters here, not who the server is.
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}
