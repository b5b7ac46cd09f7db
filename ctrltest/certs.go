package ctrltest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"time"
)

// writeCerts creates the environment's PKI in its directory:
//
//	ca.crt                   CA for both the serving and the client certificates
//	serving.crt, serving.key apiserver serving certificate for 127.0.0.1/localhost
//	sa.key, sa.pub           service account token signing key pair
//
// and keeps the CA and the admin client certificate (CN=admin,
// O=system:masters) in memory for Config.
func (e *Env) writeCerts() error {
	now := time.Now()
	notBefore, notAfter := now.Add(-time.Hour), now.Add(365*24*time.Hour)

	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "ctrltest-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, caCert, err := sign(caTemplate, caKey, nil, caKey)
	if err != nil {
		return err
	}

	servingKey, err := newKey()
	if err != nil {
		return err
	}
	servingDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}, servingKey, caCert, caKey)
	if err != nil {
		return err
	}

	adminKey, err := newKey()
	if err != nil {
		return err
	}
	adminDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, adminKey, caCert, caKey)
	if err != nil {
		return err
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}

	e.caPEM = pemBlock("CERTIFICATE", caDER)
	e.adminCertPEM = pemBlock("CERTIFICATE", adminDER)
	if e.adminKeyPEM, err = keyPEM(adminKey); err != nil {
		return err
	}
	servingKeyPEM, err := keyPEM(servingKey)
	if err != nil {
		return err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"ca.crt":      e.caPEM,
		"serving.crt": pemBlock("CERTIFICATE", servingDER),
		"serving.key": servingKeyPEM,
		"sa.key":      saKeyPEM,
		"sa.pub":      pemBlock("PUBLIC KEY", saPub),
	} {
		if err := os.WriteFile(e.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// sign issues template for key, signed by parent (self-signed when parent is
// nil) with parentKey.
func sign(template *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	template.SerialNumber = serial
	if parent == nil {
		parent = template
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return der, cert, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
