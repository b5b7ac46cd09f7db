package ctrl

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/serve"
)

// Secure serving: the manager's HTTPS servers (metrics and webhooks) and
// who may read its metrics. Metrics are served as the kubebuilder scaffold
// serves them: over HTTPS, to clients the API server authenticates and
// authorizes, so that a port of a scaffolded operator keeps its scrape
// configuration and its RBAC.

// MetricsServing says how Options.MetricsAddress serves metrics. The zero
// value serves them over HTTPS, with a self-signed certificate, to clients
// whose bearer token the API server authenticates (a TokenReview) and
// authorizes to get the path (a SubjectAccessReview for a non-resource URL),
// as controller-runtime's metrics/filters.WithAuthenticationAndAuthorization
// does.
type MetricsServing struct {
	// Insecure serves plain HTTP to anyone who reaches the address: no
	// TLS, no authentication, no authorization. For a proxy in front that
	// does them, or an address only trusted clients reach. Default: off.
	Insecure bool
	// CertDir holds the serving certificate and key as tls.crt and
	// tls.key, as a kubernetes.io/tls Secret mounts them (cert-manager
	// writes them so). Start fails if they cannot be read; when they
	// change, the next TLS handshake serves the new pair. Default: a
	// certificate for localhost made in memory at Start, as the scaffold
	// serves without cert-manager: a scraper then skips verification
	// (Prometheus' insecure_skip_verify), and still needs its token.
	CertDir string
}

// TLSOptions configure the TLS of the manager's HTTPS servers: the webhook
// server and the metrics server. The zero value accepts TLS 1.2 and 1.3
// with Go's cipher suites, over HTTP/1.1.
type TLSOptions struct {
	// MinVersion is the lowest TLS version accepted, such as
	// tls.VersionTLS13. Default: tls.VersionTLS12.
	MinVersion uint16
	// CipherSuites are the cipher suites accepted with TLS 1.2, such as
	// tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256; Go does not let TLS
	// 1.3's be chosen. Default: Go's.
	CipherSuites []uint16
	// HTTP2 offers HTTP/2. It is off by default, as in the kubebuilder
	// scaffold since the HTTP/2 advisories of 2023 (CVE-2023-44487 rapid
	// reset, CVE-2023-39325): the API server calls webhooks, and
	// Prometheus scrapes, over HTTP/1.1 as well. Default: off.
	HTTP2 bool
}

// check returns an error for a version or cipher suite Go does not know.
func (o TLSOptions) check() error {
	if v := o.MinVersion; v != 0 && (v < tls.VersionTLS10 || v > tls.VersionTLS13) {
		return fmt.Errorf("Options.TLS.MinVersion %#04x is not a TLS version: use a constant such as tls.VersionTLS13", v)
	}
	var known []uint16
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		known = append(known, s.ID)
	}
	for _, id := range o.CipherSuites {
		if !slices.Contains(known, id) {
			return fmt.Errorf("Options.TLS.CipherSuites: %#04x is not a cipher suite Go knows", id)
		}
	}
	return nil
}

// metricsEndpoint returns how Start serves metrics. Its reviews go
// through the manager's own clients: its rate limits, its connections,
// and, in tests, its fake clientset's reactors.
func (m *Manager) metricsEndpoint(gatherer prometheus.Gatherer) (serve.Metrics, error) {
	s := m.opts.MetricsServing
	out := serve.Metrics{Address: m.opts.MetricsAddress, Gatherer: gatherer, Insecure: s.Insecure, CertDir: s.CertDir}
	if out.Address == "" || s.Insecure {
		return out, nil
	}
	const hint = "ctrl: Start: metrics: serving metrics securely needs the API server (Options.Config), or set MetricsServing.Insecure"
	tokens, err := bind[*authenticationv1.TokenReview](m, APIResource{})
	if err != nil {
		return out, fmt.Errorf("%s: %w", hint, err)
	}
	reviews, err := bind[*authorizationv1.SubjectAccessReview](m, APIResource{})
	if err != nil {
		return out, fmt.Errorf("%s: %w", hint, err)
	}
	out.TokenReview = func(ctx context.Context, r *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
		return tokens.Create(ctx, r, metav1.CreateOptions{})
	}
	out.AccessReview = func(ctx context.Context, r *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		return reviews.Create(ctx, r, metav1.CreateOptions{})
	}
	return out, nil
}
