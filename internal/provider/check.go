package provider

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// execExtension is the cluster extension client-go hands to exec plugins
// (provideClusterInfo); it means nothing without one.
const execExtension = "client.authentication.k8s.io/exec"

// ErrUntrusted is wrapped by the error of a kubeconfig that names an exec
// plugin, an auth provider or a file while its source is not trusted.
var ErrUntrusted = errors.New("a kubeconfig may hold only inline data and tokens " +
	"(KubeconfigOptions.AllowExecAndFiles allows more where only the operator's administrator may write them)")

// Load returns the rest.Config of a kubeconfig's current context. Unless
// trusted, the kubeconfig is first refused if [Check] finds anything in it
// that would run a command or read a file of this process.
func Load(kubeconfig []byte, trusted bool) (*rest.Config, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	if !trusted {
		if err := Check(raw); err != nil {
			return nil, err
		}
	}
	// No ConfigAccess: an auth provider's refreshed credentials are never
	// written to the default kubeconfig files of this process.
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	if !trusted && (cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" ||
		cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "") {
		// Check missed a way client-go has of naming them: refuse all the same.
		return nil, fmt.Errorf("the current context names an exec plugin, an auth provider or a file: %w", ErrUntrusted)
	}
	return cfg, nil
}

// Check returns an error naming every field of cfg, in every cluster and
// user (used by the current context or not), through which client-go would
// run a command (exec), reach beyond the kubeconfig for credentials
// (auth-provider), or read a file (tokenFile, certificate-authority,
// client-certificate, client-key). Whoever writes such a kubeconfig runs
// code in this process or reads its files, such as its ServiceAccount's
// token, and sends them to a server of theirs. Contexts and extensions
// name no files; the exec plugins' cluster extension is refused with them.
func Check(cfg *clientcmdapi.Config) error {
	var bad []string
	flag := func(set bool, at, field string) {
		if set {
			bad = append(bad, at+field)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		if c := cfg.Clusters[name]; c != nil {
			at := fmt.Sprintf("clusters[%q].cluster.", name)
			flag(c.CertificateAuthority != "", at, "certificate-authority (a file)")
			_, ok := c.Extensions[execExtension]
			flag(ok, at, "extensions["+execExtension+"] (for an exec plugin)")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		if u := cfg.AuthInfos[name]; u != nil {
			at := fmt.Sprintf("users[%q].user.", name)
			flag(u.TokenFile != "", at, "tokenFile (a file)")
			flag(u.ClientCertificate != "", at, "client-certificate (a file)")
			flag(u.ClientKey != "", at, "client-key (a file)")
			flag(u.Exec != nil, at, "exec (runs a command)")
			flag(u.AuthProvider != nil, at, "auth-provider")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("refusing %s: %w", strings.Join(bad, ", "), ErrUntrusted)
	}
	return nil
}
