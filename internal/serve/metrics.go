package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/typedctrl/ctrl/internal/access"
)

// Metrics is where and how /metrics is served: over HTTPS to clients the
// API server authenticates and authorizes, as the kubebuilder scaffold
// serves it, unless Insecure.
type Metrics struct {
	// Address is where to listen; "" is off.
	Address string
	// Gatherer holds the metrics.
	Gatherer prometheus.Gatherer
	// Insecure serves plain HTTP to anyone.
	Insecure bool
	// CertDir holds the serving certificate and key; "" serves a
	// self-signed certificate made at Listen.
	CertDir string
	// TokenReview and AccessReview create the review they are given and
	// return the API server's answer; unused when Insecure.
	TokenReview  func(context.Context, *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error)
	AccessReview func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)
}

// metricsHandler returns the handler of m and its TLS configuration, nil
// for plain HTTP. The certificate is read now, so that a missing one
// fails Listen.
func metricsHandler(m Metrics, o TLS, log logr.Logger) (http.Handler, *tls.Config, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if m.Insecure {
		return mux, nil, nil
	}
	getCert, err := servingCertificate(m.CertDir)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	filter := access.New(m.TokenReview, m.AccessReview, log.WithValues("server", "metrics"))
	return filter.Wrap(mux), o.config(getCert), nil
}
