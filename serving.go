package ctrl

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/serve"
)

// MetricsServing says how Options.MetricsAddress serves. The zero value: HTTPS,
// self-signed, authenticated and authorized as the kubebuilder scaffold does.
type MetricsServing struct {
	// Insecure serves plain HTTP to anyone who reaches the address, for a
	// proxy in front or trusted clients. Default: off.
	Insecure bool
	// CertDir holds the certificate and key, read as Options.WebhookCertDir
	// is. Default: a localhost certificate made at Start, which scrapers do
	// not verify (insecure_skip_verify) but still send a token.
	CertDir string
}

// TLSOptions configure the webhook and metrics servers' TLS. The zero value: TLS
// 1.2 and 1.3, Go's cipher suites, HTTP/1.1.
type TLSOptions struct {
	// MinVersion is the lowest TLS version accepted, such as
	// tls.VersionTLS13. Default: tls.VersionTLS12.
	MinVersion uint16
	// CipherSuites are the cipher suites accepted with TLS 1.2, such as
	// tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256; Go does not let TLS
	// 1.3's be chosen. Default: Go's.
	CipherSuites []uint16
	// HTTP2 offers HTTP/2 (docs/why.md#http2-off-by-default). Default: off.
	HTTP2 bool
}

// metricsEndpoint's reviews use the manager's clients (in tests, the fake's reactors).
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
