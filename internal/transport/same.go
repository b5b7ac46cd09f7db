package transport

import (
	"reflect"

	"k8s.io/client-go/rest"
)

// Same reports whether a and b (either may be nil) reach a cluster the
// same way: one server, with the same credentials and TLS settings, so
// that a member engaged again with b keeps the connections it made with a.
func Same(a, b *rest.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Host == b.Host && a.BearerToken == b.BearerToken && a.BearerTokenFile == b.BearerTokenFile &&
		string(a.CAData) == string(b.CAData) && a.CAFile == b.CAFile && string(a.CertData) == string(b.CertData) &&
		a.CertFile == b.CertFile && string(a.KeyData) == string(b.KeyData) && a.KeyFile == b.KeyFile &&
		a.Username == b.Username && a.Password == b.Password && a.Insecure == b.Insecure && a.ServerName == b.ServerName &&
		reflect.DeepEqual(a.ExecProvider, b.ExecProvider) && reflect.DeepEqual(a.AuthProvider, b.AuthProvider)
}
