package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
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
