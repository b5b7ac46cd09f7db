package webhook_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// writePair writes a new self-signed pair to dir, the way write writes
// files, and returns the serving certificate's serial number.
func writePair(t *testing.T, dir string, write func(path string, data []byte, perm os.FileMode) error) string {
	t.Helper()
	_, cert, key, err := webhook.SelfSigned("webhook.ns.svc")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(filepath.Join(dir, webhook.KeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(filepath.Join(dir, webhook.CertFile), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return serialOf(t, cert)
}

func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// served returns the serial number of the certificate certs serves now.
func served(t *testing.T, certs *webhook.Certs) string {
	t.Helper()
	c, err := certs.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	if _, err := webhook.LoadCerts(dir); err == nil || !strings.Contains(err.Error(), webhook.CertFile) {
		t.Errorf("LoadCerts of an empty directory: got %v, want an error naming %s", err, webhook.CertFile)
	}

	first := writePair(t, dir, webhook.WriteFile)
	certs, err := webhook.LoadCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, certs); got != first {
		t.Fatalf("got serial %s, want %s", got, first)
	}

	// Replaced by renames, as WriteWebhookCerts and a Secret volume do.
	second := writePair(t, dir, webhook.WriteFile)
	if got := served(t, certs); got != second {
		t.Errorf("after a rename: got serial %s, want the new %s", got, second)
	}

	// Rewritten in place. The modification time tells the change; it is
	// moved on explicitly, in case the file system's clock is coarse.
	third := writePair(t, dir, func(path string, data []byte, perm os.FileMode) error {
		if err := os.WriteFile(path, data, perm); err != nil {
			return err
		}
		later := time.Now().Add(time.Minute)
		return os.Chtimes(path, later, later)
	})
	if got := served(t, certs); got != third {
		t.Errorf("after a rewrite in place: got serial %s, want the new %s", got, third)
	}

	// Half-way through a rotation the key does not match the certificate:
	// the old pair stays in service until both files are new.
	_, cert, key, err := webhook.SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.WriteFile(filepath.Join(dir, webhook.CertFile), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := served(t, certs); got != third {
		t.Errorf("with a new certificate and the old key: got serial %s, want the old %s", got, third)
	}
	if err := webhook.WriteFile(filepath.Join(dir, webhook.KeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := served(t, certs), serialOf(t, cert); got != want {
		t.Errorf("with both files new: got serial %s, want %s", got, want)
	}

	// Files that disappear for a moment keep the pair in service.
	if err := os.Remove(filepath.Join(dir, webhook.KeyFile)); err != nil {
		t.Fatal(err)
	}
	if got, want := served(t, certs), serialOf(t, cert); got != want {
		t.Errorf("with the key gone: got serial %s, want %s", got, want)
	}
}

func TestSelfSigned(t *testing.T) {
	ca, cert, key, err := webhook.SelfSigned("webhook.ns.svc")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("the CA does not parse")
	}
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "webhook.ns.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verifying for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("verifying for example.com: got nil error")
	}
}
