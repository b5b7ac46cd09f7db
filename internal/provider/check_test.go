package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
)

// usingFleet sends a request through each member it is told to engage, as
// a member's caches do at once, so that whatever the member's kubeconfig
// makes client-go do (read a token file, run a plugin) happens.
type usingFleet struct {
	mu      sync.Mutex
	engaged []string
}

func (f *usingFleet) Engage(name string, cfg *rest.Config) error {
	f.mu.Lock()
	f.engaged = append(f.engaged, name)
	f.mu.Unlock()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	resp, err := hc.Get(cfg.Host + "/version")
	if err != nil {
		return nil // a plugin that failed after it ran, say
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (f *usingFleet) Disengage(string) {}

func (f *usingFleet) members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.engaged...)
}

// listener is a member's server, run by whoever wrote the kubeconfig: it
// keeps the Authorization headers it is sent.
type listener struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newListener(t *testing.T) *listener {
	l := &listener{}
	l.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.auth = append(l.auth, r.Header.Get("Authorization"))
		l.mu.Unlock()
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *listener) received() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.auth...)
}

// TestHostileKubeconfig puts kubeconfigs that name the operator's files or
// a command into a Secret's data and a directory of kubeconfig files, the
// two ways a member's kubeconfig comes in. Untrusted, each is refused with
// an error naming its source and the field, its member is not engaged, its
// server never gets the operator's token and its command never runs;
// trusted, the same kubeconfig is honoured: the token arrives and the
// command runs, so the test would see a leak.
func TestHostileKubeconfig(t *testing.T) {
	dir := t.TempDir()
	const secretToken = "the-operators-serviceaccount-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(secretToken), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newListener(t)
	cluster := fmt.Sprintf("clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\n", srv.URL)
	doc := func(user string) []byte {
		return []byte("apiVersion: v1\nkind: Config\n" + cluster +
			"users: [{name: u, user: " + user + "}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
	}
	for _, tc := range []struct {
		name, user, field string
		leaks             bool   // the token reaches the server when honoured
		ran               string // a file the command writes when honoured
	}{
		{name: "token file", user: fmt.Sprintf("{tokenFile: %q}", tokenFile), field: `users["u"].user.tokenFile`, leaks: true},
		{name: "token file beside a token", user: fmt.Sprintf("{token: mine, tokenFile: %q}", tokenFile), field: `users["u"].user.tokenFile`, leaks: true},
		{name: "exec plugin", ran: "ran", field: `users["u"].user.exec`},
		{name: "client certificate", user: fmt.Sprintf("{client-certificate: %q, client-key: %q}", tokenFile, tokenFile), field: `users["u"].user.client-certificate`},
		{name: "auth provider", user: "{auth-provider: {name: oidc, config: {idp-issuer-url: 'https://issuer'}}}", field: `users["u"].user.auth-provider`},
	} {
		for _, way := range []string{"secret", "file"} {
			for _, trusted := range []bool{false, true} {
				if trusted && !tc.leaks && tc.ran == "" {
					continue // client-go refuses them itself, for other reasons
				}
				t.Run(fmt.Sprintf("%s/%s/trusted=%v", tc.name, way, trusted), func(t *testing.T) {
					user := tc.user
					marker := filepath.Join(t.TempDir(), "ran")
					if tc.ran != "" {
						user = fmt.Sprintf("{exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: /bin/sh, args: [-c, %q]}}",
							"echo ran > "+marker+"; exit 1")
					}
					data := doc(user)
					before := len(srv.received())
					fleet := &usingFleet{}
					var err error
					switch way {
					case "secret":
						err = EngageSecret(fleet, "fleet", "east", map[string][]byte{SecretKey: data}, trusted)
					case "file": // one read of a directory, its error logged
						files := t.TempDir()
						if err := os.WriteFile(filepath.Join(files, "east.yaml"), data, 0o600); err != nil {
							t.Fatal(err)
						}
						log := funcr.New(func(_, args string) { err = errors.New(args) }, funcr.Options{})
						ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
						cancel()
						if err := NewDir(files, time.Hour, trusted).Run(ctx, fleet); err != nil {
							t.Fatal(err)
						}
					}
					_, statErr := os.Stat(marker)
					ran := statErr == nil
					leaked := strings.Contains(strings.Join(srv.received()[before:], " "), secretToken)
					if trusted {
						switch {
						case err != nil:
							t.Fatalf("trusted: got %v, want it engaged", err)
						case tc.leaks && !leaked:
							t.Fatalf("trusted: the server got %q, want the token file's token", srv.received()[before:])
						case tc.ran != "" && !ran:
							t.Fatal("trusted: the exec plugin did not run")
						}
						return
					}
					if leaked {
						t.Errorf("the kubeconfig's server got the operator's token: %q", srv.received()[before:])
					}
					if ran {
						t.Error("the kubeconfig's exec plugin ran")
					}
					if m := fleet.members(); len(m) != 0 {
						t.Errorf("engaged %v, want nothing", m)
					}
					if err == nil {
						t.Fatalf("got no error, want one naming %s", tc.field)
					}
					source := "kubeconfig Secret fleet/east, key \"kubeconfig\""
					if way == "file" {
						source = "east.yaml"
					}
					if msg := strings.ReplaceAll(err.Error(), `\"`, `"`); !strings.Contains(msg, source) || !strings.Contains(msg, tc.field) ||
						way == "secret" && !errors.Is(err, ErrUntrusted) {
						t.Errorf("got error %q, want one naming %q and %s, wrapping ErrUntrusted", msg, source, tc.field)
					}
				})
			}
		}
	}
}

// TestHostileKubeconfigDir runs a directory provider over a kubeconfig
// file that names the operator's token file: the member is not engaged and
// the file is named in the log; a file of inline credentials beside it is.
func TestHostileKubeconfigDir(t *testing.T) {
	srv := newListener(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("operator-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf("clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\n"+
		"users: [{name: u, user: {tokenFile: %q}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", srv.URL, tokenFile)
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "good.yaml"), kubeconfig(srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	fleet := &usingFleet{}
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	cancel() // one read of the directory
	if err := NewDir(dir, time.Hour, false).Run(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	if got := fleet.members(); len(got) != 1 || got[0] != "good" {
		t.Errorf("engaged %v, want [good]", got)
	}
	if all := strings.Join(logged, "\n"); !strings.Contains(all, filepath.Join(dir, "bad.yaml")) || !strings.Contains(all, `users[\"u\"].user.tokenFile`) {
		t.Errorf("logged %q, want the file and the field named", logged)
	}
	for _, a := range srv.received() {
		if strings.Contains(a, "operator-token") {
			t.Errorf("the server got the operator's token: %q", a)
		}
	}
}
