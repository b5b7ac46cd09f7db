package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names of the serving certificate and key in a certificate
// directory: those of a kubernetes.io/tls Secret, which is what
// cert-manager writes and a Secret volume mounts.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Certs serves the certificate in a directory and loads it again when its
// files change. A Secret volume is updated by swapping a symbolic link, and
// other tools rewrite the files in place, so the key and the certificate can
// briefly disagree: a pair that does not load keeps the previous one in
// service until a later handshake finds both files complete. Checking on
// each handshake costs two stat calls and needs no goroutine.
type Certs struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	certStat os.FileInfo
	keyStat  os.FileInfo
}

// LoadCerts loads tls.crt and tls.key from dir.
func LoadCerts(dir string) (*Certs, error) {
	c := &Certs{certFile: filepath.Join(dir, CertFile), keyFile: filepath.Join(dir, KeyFile)}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate is tls.Config.GetCertificate: it returns the current
// certificate, loading it again first if its files changed.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.reload()
}

func (c *Certs) reload() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	certStat, err1 := os.Stat(c.certFile)
	keyStat, err2 := os.Stat(c.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if c.cert != nil {
			return c.cert, nil // being replaced: keep serving the old pair
		}
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	if c.cert != nil && same(certStat, c.certStat) && same(keyStat, c.keyStat) {
		return c.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.cert != nil {
			return c.cert, nil
		}
		return nil, fmt.Errorf("loading the serving certificate from %s and %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.certStat, c.keyStat = &cert, certStat, keyStat
	return c.cert, nil
}

// same reports whether two stats of a path are of the same, unchanged file.
func same(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// SelfSigned returns a new CA and a serving certificate it signed, valid for
// a year for 127.0.0.1, ::1, localhost and dnsNames, all PEM encoded.
func SelfSigned(dnsNames ...string) (caPEM, certPEM, keyPEM []byte, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	ca := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "ctrl webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if ca.SerialNumber, err = serial(); err != nil {
		return nil, nil, nil, err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ctrl webhook"},
		NotBefore:   ca.NotBefore,
		NotAfter:    ca.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    append([]string{"localhost"}, dnsNames...),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if leaf.SerialNumber, err = serial(); err != nil {
		return nil, nil, nil, err
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

// WriteCerts writes a new CA and a serving certificate it signed, as
// SelfSigned makes them, to dir (created if needed) as tls.crt, tls.key and
// ca.crt, each by rename, and returns the CA in PEM.
func WriteCerts(dir string, dnsNames ...string) (caPEM []byte, err error) {
	ca, cert, key, err := SelfSigned(dnsNames...)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{KeyFile, key, 0o600}, {CertFile, cert, 0o644}, {CAFile, ca, 0o644}} {
		if err := WriteFile(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// WriteFile writes data to path through a temporary file in the same
// directory and a rename, so a reader sees the old file or the new one,
// never a part.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
