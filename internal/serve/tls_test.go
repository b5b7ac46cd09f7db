package serve

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestTLSCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  TLS
		want string // in the error; "" none
	}{
		{"zero", TLS{}, ""},
		{"TLS 1.3", TLS{MinVersion: tls.VersionTLS13}, ""},
		{"an insecure suite Go knows", TLS{CipherSuites: []uint16{tls.TLS_RSA_WITH_RC4_128_SHA}}, ""},
		{"not a version", TLS{MinVersion: 13}, "Options.TLS.MinVersion 0x000d is not a TLS version"},
		{"past TLS 1.3", TLS{MinVersion: tls.VersionTLS13 + 1}, "0x0305 is not a TLS version"},
		{"an unknown suite", TLS{CipherSuites: []uint16{tls.TLS_AES_128_GCM_SHA256, 0xffff}}, "Options.TLS.CipherSuites: 0xffff is not a cipher suite"},
	} {
		err := tc.tls.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}
