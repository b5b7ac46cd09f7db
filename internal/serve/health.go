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
func (s *Servers) healthHandler(ready func() Readiness, webhook bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		state := ready()
		if len(state.NotReady) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready:\n%s\n", strings.Join(state.NotReady, "\n"))
			return
		}
		if webhook {
			if err := handshake(r.Context(), s.addresses.Webhook); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "webhook server not serving: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
		slices.Sort(state.Optional)
		for _, lines := range [][]string{{state.Policy}, state.Optional, state.Warnings, state.Refused, state.Members} {
			for _, line := range lines {
				if line != "" {
					fmt.Fprintln(w, line)
				}
			}
		}
	})
	return mux
}

// Readiness is what /readyz reports: it fails while anything is NotReady;
// otherwise it answers "ok" and the rest, a line each, for people to read.
type Readiness struct {
	NotReady []string // why the manager is not ready: caches not synced, forbidden, their CRD gone
	Policy   string   // who acts: leadership or the shard served
	Optional []string // optional kinds waiting for their CRD, sorted here
	Warnings []string // what ready caches are refused
	Refused  []string // other requests the server refuses
	Members  []string // fleet members down
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
