package serve

import (
	"crypto/tls"
	"fmt"
	"slices"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// TLS configures the TLS of the HTTPS servers; its fields are those of
// ctrl's TLSOptions, which converts to it.
type TLS struct {
	// MinVersion is the lowest version accepted; 0 means TLS 1.2.
	MinVersion uint16
	// CipherSuites are the TLS 1.2 cipher suites accepted; nil means Go's.
	CipherSuites []uint16
	// HTTP2 offers HTTP/2 besides HTTP/1.1.
	HTTP2 bool
}

// Check returns an error naming the option, as ctrl's Options.TLS, that
// is not a TLS version or a cipher suite Go knows.
func (o TLS) Check() error {
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

// config returns the TLS configuration of a server that serves the
// certificate getCert returns.
func (o TLS) config(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   slices.Clone(o.CipherSuites),
		GetCertificate: getCert,
		// Without "h2" here, no client can negotiate HTTP/2: Go's server
		// speaks it over TLS only when ALPN picked it.
		NextProtos: []string{"http/1.1"},
	}
	if o.MinVersion != 0 {
		c.MinVersion = o.MinVersion
	}
	if o.HTTP2 {
		c.NextProtos = []string{"h2", "http/1.1"}
	}
	return c
}

// servingCertificate returns the function that serves the certificate in
// dir, read again when its files change, or, for no dir, a self-signed
// certificate made now.
func servingCertificate(dir string) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if dir != "" {
		certs, err := webhook.LoadCerts(dir)
		if err != nil {
			return nil, err
		}
		return certs.GetCertificate, nil
	}
	_, certPEM, keyPEM, err := webhook.SelfSigned()
	if err != nil {
		return nil, fmt.Errorf("making a self-signed certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("making a self-signed certificate: %w", err)
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, nil
}
