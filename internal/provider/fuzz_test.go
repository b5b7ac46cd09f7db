package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
)

// FuzzKubeconfigDir puts a file of any name and content in a directory of
// kubeconfig files and reads it once: a member is engaged only from a file
// that names one (not hidden, of a kubeconfig's extension), under a name
// that is a DNS label, and only for a kubeconfig that gives a server; no
// input panics.
func FuzzKubeconfigDir(f *testing.F) {
	f.Add("east.yaml", kubeconfig("https://east:6443"))
	f.Add("west", kubeconfig("https://west:6443"))
	f.Add(".east.yaml.swp", kubeconfig("https://swap:6443"))
	f.Add("East.json", []byte(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://e"}}],"contexts":[{"name":"x","context":{"cluster":"c"}}],"current-context":"x"}`))
	f.Add("a.conf", []byte("apiVersion: v1\nkind: Config\ncurrent-context: missing\n"))
	f.Add("b.kubeconfig", []byte("clusters: [{name: c, cluster: {server: 'http://[::1'}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n"))
	f.Add("c.yml", []byte("{{{{"))
	f.Add("d.yaml", []byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file string, data []byte) {
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, "/\x00") || len(file) > 200 {
			return // not a file name
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return
		}
		defer os.Remove(path)
		fleet := &recordingFleet{}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // one read of the directory
		if err := NewDir(dir, time.Hour, false).Run(ctx, fleet); err != nil {
			t.Fatal(err)
		}
		calls := fleet.snapshot()
		if len(calls) == 0 {
			return
		}
		name, ok := memberName(file)
		if !ok || len(calls) != 1 || !strings.HasPrefix(calls[0], "engage "+name+" ") {
			t.Fatalf("file %q: got calls %q, want one engaging the member it names", file, calls)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 || strings.HasPrefix(name, ".") {
			t.Fatalf("file %q: engaged member %q, not a DNS label", file, name)
		}
		if strings.TrimPrefix(calls[0], "engage "+name+" ") == "" {
			t.Fatalf("file %q: engaged %q without a server", file, name)
		}
	})
}

// FuzzKubeconfig loads any bytes as a kubeconfig from a source that is not
// trusted: what is accepted names no exec plugin, auth provider or file
// anywhere, and gives client-go none of them to use; a trusted source
// accepts all that an untrusted one does, alike. No input panics.
func FuzzKubeconfig(f *testing.F) {
	head := "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
	for _, tail := range []string{
		"clusters: [{name: c, cluster: {server: 'https://e:6443', certificate-authority-data: Zm9v}}]\nusers: [{name: u, user: {token: t}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443'}}]\nusers: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443'}}]\nusers: [{name: u, user: {token: t, tokenFile: /etc/passwd}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443'}}]\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, interactiveMode: Never}}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443'}}]\nusers: [{name: u, user: {auth-provider: {name: oidc}}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443', certificate-authority: /etc/ca.crt}}]\nusers: [{name: u, user: {client-certificate: /c, client-key: /k}}]\n",
		"clusters: [{name: c, cluster: {server: 'https://e:6443', extensions: [{name: client.authentication.k8s.io/exec, extension: {a: b}}]}}]\nusers: [{name: u, user: {}}]\n",
		"clusters: [{name: c, cluster: {server: 'http://e'}}, {name: other, cluster: {server: 'https://o', certificate-authority: /ca}}]\nusers: [{name: u, user: {token: t}}, {name: unused, user: {tokenFile: /t}}]\n",
	} {
		f.Add([]byte(head + tail))
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://e"}}],"users":[{"name":"u","user":{"tokenFile":"/t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`))
	f.Add([]byte("{{{{"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data, false)
		if err != nil {
			if _, terr := Load(data, true); terr == nil && !errors.Is(err, ErrUntrusted) {
				t.Fatalf("refused untrusted for another reason than trust (%v), accepted trusted", err)
			}
			return
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
			t.Fatalf("accepted untrusted with exec %v, auth provider %v, files %q %q %q %q",
				cfg.ExecProvider, cfg.AuthProvider, cfg.BearerTokenFile, cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		}
		raw, err := clientcmd.Load(data)
		if err != nil {
			t.Fatalf("Load accepted what clientcmd.Load refuses: %v", err)
		}
		if err := Check(raw); err != nil {
			t.Fatalf("accepted untrusted although Check refuses it: %v", err)
		}
		trusted, err := Load(data, true)
		if err != nil || trusted.Host != cfg.Host || trusted.BearerToken != cfg.BearerToken {
			t.Fatalf("trusted: got %v, %v; untrusted got host %q", trusted, err, cfg.Host)
		}
	})
}
