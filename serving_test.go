package ctrl_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
)

// reviewingFake returns a fake clientset that answers TokenReviews and
// SubjectAccessReviews as an API server would where the token "prom" is
// the user prometheus, who may get /metrics, and "alice" is alice, who may
// not.
func reviewingFake() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, kruntime.Object, error) {
		r := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if user := map[string]string{"prom": "prometheus", "alice": "alice"}[r.Spec.Token]; user != "" {
			r.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
		}
		return true, r, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, kruntime.Object, error) {
		r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		nr := r.Spec.NonResourceAttributes
		r.Status.Allowed = r.Spec.User == "prometheus" && nr != nil && nr.Path == "/metrics" && nr.Verb == "get"
		return true, r, nil
	})
	return cs
}

// scrape gets url with the bearer token (none if "") through client.
func scrape(t *testing.T, client *http.Client, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, string(body)
}

// TestSecureMetrics checks the metrics endpoint's default: HTTPS with a
// self-signed certificate, HTTP/1.1, and only clients the API server
// authenticates and authorizes.
func TestSecureMetrics(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: reviewingFake(), MetricsAddress: "127.0.0.1:0"})
	_, err := ctrl.NewController(mgr, "secure", noop, ctrl.ControllerOptions{})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)
	// A self-signed certificate: scrapers skip verification, as
	// Prometheus' insecure_skip_verify.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true} //nolint:gosec
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	url := "https://" + mgr.Addresses().Metrics + "/metrics"
	for _, tt := range []struct {
		token string
		code  int
		body  string
	}{
		{"", 401, "Unauthorized"},
		{"made-up", 401, "Unauthorized"},
		{"alice", 403, `Forbidden: user "alice" may not get /metrics`},
		{"prom", 200, `controller_runtime_max_concurrent_reconciles{controller="secure"} 1`},
	} {
		resp, body := scrape(t, client, url, tt.token)
		if resp.StatusCode != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("token %q: got %d %.200q, want %d with %q", tt.token, resp.StatusCode, body, tt.code, tt.body)
		}
		if resp.Proto != "HTTP/1.1" {
			t.Errorf("token %q: got %s, want HTTP/1.1", tt.token, resp.Proto)
		}
	}
	// Go's TLS server answers plain HTTP with 400.
	if resp, err := http.Get("http://" + mgr.Addresses().Metrics + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP: got %d, want 400", resp.StatusCode)
		}
	}
}

// TestServingTLSOptions checks that Options.TLS sets the versions, cipher
// suites and HTTP/2 of the metrics and webhook servers, and that a metrics
// certificate from a directory is served and reloaded.
func TestServingTLSOptions(t *testing.T) {
	dir := t.TempDir()
	ca, err := ctrl.WriteWebhookCerts(dir)
	must(t, err)
	suite := tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
	mgr := newManager(t, ctrl.Options{
		FakeClientset:  reviewingFake(),
		MetricsAddress: "127.0.0.1:0", MetricsServing: ctrl.MetricsServing{CertDir: dir},
		WebhookAddress: "127.0.0.1:0", WebhookCertDir: dir,
		TLS: ctrl.TLSOptions{MinVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}, HTTP2: true},
	})
	must(t, ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{Create: func(context.Context, *corev1.ConfigMap) error { return nil }}))
	start(t, mgr)
	waitIdle(t, mgr)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := func(config *tls.Config) *http.Client {
		config.RootCAs = roots
		tr := &http.Transport{TLSClientConfig: config, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	for name, addr := range map[string]string{"metrics": mgr.Addresses().Metrics, "webhook": mgr.Addresses().Webhook} {
		t.Run(name, func(t *testing.T) {
			url := "https://" + addr + "/metrics"
			resp, _ := scrape(t, client(&tls.Config{}), url, "prom")
			if resp.Proto != "HTTP/2.0" {
				t.Errorf("got %s, want HTTP/2.0", resp.Proto)
			}
			if s := resp.TLS.CipherSuite; resp.TLS.Version == tls.VersionTLS12 && s != suite {
				t.Errorf("got cipher suite %s, want %s", tls.CipherSuiteName(s), tls.CipherSuiteName(suite))
			}
			other := client(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}})
			if _, err := other.Get(url); err == nil || !strings.Contains(err.Error(), "handshake failure") {
				t.Errorf("TLS 1.2 with another cipher suite: got %v, want a handshake failure", err)
			}
			resp, _ = scrape(t, client(&tls.Config{MaxVersion: tls.VersionTLS12}), url, "prom")
			if resp.TLS.CipherSuite != suite {
				t.Errorf("TLS 1.2: got cipher suite %s, want %s", tls.CipherSuiteName(resp.TLS.CipherSuite), tls.CipherSuiteName(suite))
			}
		})
	}

	// A new certificate in the directory is served from the next handshake.
	ca, err = ctrl.WriteWebhookCerts(dir)
	must(t, err)
	roots = x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	if resp, _ := scrape(t, client(&tls.Config{}), "https://"+mgr.Addresses().Metrics+"/metrics", "prom"); resp.StatusCode != 200 {
		t.Errorf("with the new certificate: got %d, want 200", resp.StatusCode)
	}
}

func TestServingOptionErrors(t *testing.T) {
	for name, tt := range map[string]struct {
		opts ctrl.Options
		want string
	}{
		"a version": {ctrl.Options{FakeClientset: fake.NewClientset(), TLS: ctrl.TLSOptions{MinVersion: 12}},
			"ctrl: NewManager: Options.TLS.MinVersion 0x000c is not a TLS version: use a constant such as tls.VersionTLS13"},
		"a cipher suite": {ctrl.Options{FakeClientset: fake.NewClientset(), TLS: ctrl.TLSOptions{CipherSuites: []uint16{0xffff}}},
			"ctrl: NewManager: Options.TLS.CipherSuites: 0xffff is not a cipher suite Go knows"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ctrl.NewManager(tt.opts); err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}
	// Secure metrics need a client that can ask for reviews.
	mgr := newManager(t, ctrl.Options{FakeDynamic: newWidgetFake(), MetricsAddress: "127.0.0.1:0"})
	err := mgr.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ctrl: Start: metrics: serving metrics securely needs the API server") {
		t.Errorf("Start: got %v, want an error saying secure metrics need the API server", err)
	}
	// A certificate directory without a certificate fails Start.
	mgr = newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), MetricsAddress: "127.0.0.1:0", MetricsServing: ctrl.MetricsServing{CertDir: t.TempDir()}})
	if err := mgr.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("Start without a certificate: got %v, want an error naming tls.crt", err)
	}
}
