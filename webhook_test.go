package ctrl_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

func TestWebhookWiringErrors(t *testing.T) {
	type unregistered struct{ Widget }
	mgr := newManager(t, ctrl.Options{FakeDynamic: newWidgetFake()})
	ok := func(context.Context, *Widget) error { return nil }
	secretOK := func(context.Context, *corev1.Secret) error { return nil }
	must(t, ctrl.Validate(mgr, ctrl.Validator[*Widget]{Create: ok}))
	must(t, ctrl.Mutate(mgr, ok))
	must(t, ctrl.Convert(mgr, func(context.Context, *WidgetV1alpha1, *Widget) error { return nil }, func(context.Context, *Widget, *WidgetV1alpha1) error { return nil }))
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unregistered type", ctrl.Validate(mgr, ctrl.Validator[*unregistered]{Create: func(context.Context, *unregistered) error { return nil }}),
			"ctrl: Validate: *ctrl_test.unregistered is not a known resource"},
		{"second validator", ctrl.Validate(mgr, ctrl.Validator[*Widget]{Update: func(context.Context, *Widget, *Widget) error { return nil }}),
			"ctrl: Validate: a validating webhook for *ctrl_test.Widget (widgets.example.com/v1) is already registered at /validate-example-com-v1-widget"},
		{"no function", ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{}),
			"ctrl: Validate: validating webhook for *v1.ConfigMap (configmaps): set Create, Update or Delete"},
		{"second defaulter", ctrl.Mutate(mgr, ok), "ctrl: Mutate: a mutating webhook for *ctrl_test.Widget"},
		{"nil defaulter", ctrl.Mutate[*corev1.ConfigMap](mgr, nil), "ctrl: Mutate *v1.ConfigMap: the function is nil"},
		{"second conversion", ctrl.Convert(mgr, func(context.Context, *Widget, *WidgetV1alpha1) error { return nil }, func(context.Context, *WidgetV1alpha1, *Widget) error { return nil }),
			"already registered"},
		{"conversion of a built-in type", ctrl.Convert(mgr, func(context.Context, *corev1.ConfigMap, *Widget) error { return nil }, func(context.Context, *Widget, *corev1.ConfigMap) error { return nil }),
			"only custom resources are converted by webhooks"},
		{"a taken path", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{Path: "/validate-example-com-v1-widget"}),
			"ctrl: Validate: validating webhook for *v1.Secret (secrets): path /validate-example-com-v1-widget is taken by the webhook v1.widgets.example.com"},
		{"the conversion's path", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{Path: "/convert"}),
			"path /convert is the conversion webhook's"},
		{"a relative path", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{Path: "validate"}),
			`path "validate": want an absolute URL path`},
		{"a name of two segments", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{Name: "vsecret.io"}),
			`name "vsecret.io": want a DNS subdomain of three segments at least`},
		{"a taken name", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{Name: "v1.widgets.example.com"}),
			`another validating webhook, at /validate-example-com-v1-widget, is named "v1.widgets.example.com"`},
		{"two options", ctrl.Validate(mgr, ctrl.Validator[*corev1.Secret]{Create: secretOK}, ctrl.WebhookOptions{}, ctrl.WebhookOptions{}),
			"2 WebhookOptions given, want one at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", tt.err, tt.want)
			}
		})
	}

	mgr.WebhookHandler() // served by nobody, but Start then needs no address
	start(t, mgr)
	waitIdle(t, mgr)
	for name, err := range map[string]error{
		"Validate": ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{Create: func(context.Context, *corev1.ConfigMap) error { return nil }}),
		"Mutate":   ctrl.Mutate(mgr, func(context.Context, *corev1.ConfigMap) error { return nil }),
		"Convert":  ctrl.Convert(mgr, func(context.Context, *WidgetV1alpha1, *Widget) error { return nil }, func(context.Context, *Widget, *WidgetV1alpha1) error { return nil }),
	} {
		if !errors.Is(err, ctrl.ErrStarted) {
			t.Errorf("%s after Start: got %v, want ErrStarted", name, err)
		}
	}
}

// tlsClient returns a client that trusts only the CA in caPEM, on a
// transport of its own, so each client makes its own connections.
func tlsClient(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// configMapReview returns an AdmissionReview that creates a ConfigMap.
func configMapReview(t *testing.T, data map[string]string) []byte {
	t.Helper()
	raw, err := json.Marshal(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: data})
	must(t, err)
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Operation: admissionv1.Create,
			Namespace: "ns", Name: "cm", Object: runtime.RawExtension{Raw: raw},
		},
	})
	must(t, err)
	return body
}

// TestWebhookServer runs the webhook server of a started manager over TLS,
// for a built-in type: its answers, HTTP/1.1 only by default, its metrics,
// its readiness check, and a certificate replaced on disk while it serves.
func TestWebhookServer(t *testing.T) {
	dir := t.TempDir()
	firstCA, err := ctrl.WriteWebhookCerts(dir)
	must(t, err)
	reg := prometheus.NewRegistry()
	mgr := newManager(t, ctrl.Options{
		FakeClientset: fake.NewClientset(), Registerer: reg,
		// Addr tells endpoints apart by their configured address.
		WebhookAddress: "127.0.0.1:0", WebhookCertDir: dir, HealthAddress: "localhost:0",
	})
	must(t, ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{
		Create: func(_ context.Context, cm *corev1.ConfigMap) error {
			if _, ok := cm.Data["password"]; ok {
				return errors.New("passwords belong in Secrets")
			}
			return nil
		},
	}))
	start(t, mgr)
	waitIdle(t, mgr)
	url := "https://" + mgr.Addresses().Webhook + "/validate--v1-configmap?timeout=10s"

	post := func(client *http.Client, data map[string]string) (*admissionv1.AdmissionResponse, error) {
		resp, err := client.Post(url, "application/json", bytes.NewReader(configMapReview(t, data)))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.Proto != "HTTP/1.1" {
			t.Errorf("got protocol %s, want HTTP/1.1", resp.Proto)
		}
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
			return nil, err
		}
		return review.Response, nil
	}
	client := tlsClient(t, firstCA)
	resp, err := post(client, map[string]string{"password": "hunter2"})
	must(t, err)
	if resp.Allowed || resp.Result.Code != 403 || resp.Result.Message != "passwords belong in Secrets" {
		t.Errorf("got %+v, want a 403 denial with the validator's message", resp.Result)
	}
	resp, err = post(client, map[string]string{"user": "alice"})
	must(t, err)
	if !resp.Allowed {
		t.Errorf("got %+v, want allowed", resp.Result)
	}

	if code, body := get(t, "http://"+mgr.Addresses().Health+"/readyz"); code != 200 {
		t.Errorf("readyz: got %d %s, want 200", code, body)
	}
	families, err := reg.Gather()
	must(t, err)
	found := map[string]bool{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == "/validate--v1-configmap" {
					found[mf.GetName()] = true
				}
			}
		}
	}
	for _, name := range []string{"controller_runtime_webhook_requests_total", "controller_runtime_webhook_latency_seconds", "controller_runtime_webhook_requests_in_flight"} {
		if !found[name] {
			t.Errorf("no %s series for the webhook", name)
		}
	}

	// cert-manager replaces the files; a new connection gets the new
	// certificate, which only the new CA verifies.
	secondCA, err := ctrl.WriteWebhookCerts(dir)
	must(t, err)
	if _, err := post(tlsClient(t, secondCA), map[string]string{"user": "bob"}); err != nil {
		t.Errorf("with the new CA: %v", err)
	}
	if _, err := post(tlsClient(t, firstCA), nil); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("with the old CA: got %v, want an unknown authority", err)
	}
	// The connection made before the rotation still works.
	if _, err := post(client, nil); err != nil {
		t.Errorf("on the connection made before the rotation: %v", err)
	}
}

func TestWebhookServerNeedsCerts(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), WebhookAddress: "127.0.0.1:0", WebhookCertDir: t.TempDir()})
	err := mgr.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("Start without certificates: got %v, want an error naming tls.crt", err)
	}
}

func TestWebhookConfigurations(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: newWidgetFake(), Namespace: "team"})
	must(t, ctrl.Validate(mgr, ctrl.Validator[*corev1.Namespace]{Delete: func(context.Context, *corev1.Namespace) error { return nil }}))
	must(t, ctrl.Validate(mgr, ctrl.Validator[*Widget]{
		Create: func(context.Context, *Widget) error { return nil },
		Update: func(context.Context, *Widget, *Widget) error { return nil },
	}))
	must(t, ctrl.Mutate(mgr, func(context.Context, *corev1.ConfigMap) error { return nil }))

	if _, err := mgr.WebhookConfigurations("x", ctrl.WebhookTarget{}); err == nil {
		t.Error("no target: got nil error")
	}
	port := int32(8443)
	configs, err := mgr.WebhookConfigurations("team-hooks", ctrl.WebhookTarget{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "team", Name: "hooks", Port: &port},
		CABundle: []byte("CA"),
	})
	must(t, err)
	if configs.Conversions != nil {
		t.Errorf("got conversions %v, want none", configs.Conversions)
	}
	v, m := configs.Validating, configs.Mutating
	if v.Name != "team-hooks" || v.Kind != "ValidatingWebhookConfiguration" || v.APIVersion != "admissionregistration.k8s.io/v1" || len(v.Webhooks) != 2 {
		t.Fatalf("got %+v, want a ValidatingWebhookConfiguration team-hooks with 2 webhooks", v)
	}
	if m.Name != "team-hooks" || m.Kind != "MutatingWebhookConfiguration" || len(m.Webhooks) != 1 {
		t.Fatalf("got %+v, want a MutatingWebhookConfiguration team-hooks with 1 webhook", m)
	}
	ns, widget, cm := v.Webhooks[0], v.Webhooks[1], m.Webhooks[0]
	summary := func(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations, sel *metav1.LabelSelector) string {
		r := rules[0]
		if s := cc.Service; s.Namespace != "team" || s.Name != "hooks" || *s.Port != 8443 || string(cc.CABundle) != "CA" || cc.URL != nil {
			t.Errorf("%s: got client config %+v, want the Service and CA bundle", name, cc)
		}
		return fmt.Sprintf("%s %s %s %v %q/%s/%s selector:%v", name, *cc.Service.Path, *r.Scope, r.Operations,
			strings.Join(r.APIGroups, ","), strings.Join(r.APIVersions, ","), strings.Join(r.Resources, ","), sel != nil)
	}
	for _, tt := range []struct{ got, want string }{
		{summary(ns.Name, ns.ClientConfig, ns.Rules, ns.NamespaceSelector),
			`v1.namespaces.core /validate--v1-namespace Cluster [DELETE] ""/v1/namespaces selector:false`},
		{summary(widget.Name, widget.ClientConfig, widget.Rules, widget.NamespaceSelector),
			`v1.widgets.example.com /validate-example-com-v1-widget Namespaced [CREATE UPDATE] "example.com"/v1/widgets selector:true`},
		{summary(cm.Name, cm.ClientConfig, cm.Rules, cm.NamespaceSelector),
			`v1.configmaps.core /mutate--v1-configmap Namespaced [CREATE UPDATE] ""/v1/configmaps selector:true`},
	} {
		if tt.got != tt.want {
			t.Errorf("got  %s\nwant %s", tt.got, tt.want)
		}
	}
	if sel := widget.NamespaceSelector; sel == nil || sel.MatchExpressions[0].Key != "kubernetes.io/metadata.name" || sel.MatchExpressions[0].Values[0] != "team" {
		t.Errorf("got namespace selector %+v, want the manager's namespace", sel)
	}
	for _, h := range []admissionregistrationv1.ValidatingWebhook{ns, widget} {
		if *h.FailurePolicy != admissionregistrationv1.Fail || *h.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			*h.TimeoutSeconds != 10 || *h.MatchPolicy != admissionregistrationv1.Equivalent || h.AdmissionReviewVersions[0] != "v1" {
			t.Errorf("got %+v, want fail closed, no side effects, 10 s, equivalent versions, v1 reviews", h)
		}
	}
}

// TestWebhookHandlerNotFound checks that an unregistered path is a 404 with
// a message, on a manager with no webhooks.
func TestWebhookHandlerNotFound(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	rec := httptest.NewRecorder()
	mgr.WebhookHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/validate-apps-v1-deployment", strings.NewReader("{}")))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "no webhook is registered at /validate-apps-v1-deployment") {
		t.Errorf("got %d %q, want 404 naming the path", rec.Code, rec.Body.String())
	}
}

// TestWebhooksNeedAServer checks that a manager with webhooks fails to start
// when nothing would serve them, and starts when the program serves them.
func TestWebhooksNeedAServer(t *testing.T) {
	validator := ctrl.Validator[*corev1.ConfigMap]{Create: func(context.Context, *corev1.ConfigMap) error { return nil }}
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	must(t, ctrl.Validate(mgr, validator))
	must(t, ctrl.Mutate(mgr, func(context.Context, *corev1.ConfigMap) error { return nil }, ctrl.WebhookOptions{Path: "/default-cm"}))
	err := mgr.Start(context.Background())
	want := `ctrl: Start: webhooks are registered (/default-cm, /validate--v1-configmap) but nothing serves them: set Options.WebhookAddress, such as ":9443", or serve Manager.WebhookHandler yourself`
	if err == nil || err.Error() != want {
		t.Errorf("Start: got %v, want %s", err, want)
	}

	served := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	must(t, ctrl.Validate(served, validator))
	srv := httptest.NewServer(served.WebhookHandler())
	defer srv.Close()
	start(t, served)
	waitIdle(t, served)
}

// TestWebhookOptions checks that chosen paths and names are served and
// configured.
func TestWebhookOptions(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	must(t, ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{
		Create: func(context.Context, *corev1.ConfigMap) error { return errors.New("no") },
	}, ctrl.WebhookOptions{Path: "/validate-v1-configmap", Name: "vconfigmap.kb.io"}))
	must(t, ctrl.Mutate(mgr, func(context.Context, *corev1.ConfigMap) error { return nil }, ctrl.WebhookOptions{Name: "mconfigmap.kb.io"}))
	configs, err := mgr.WebhookConfigurations("hooks", ctrl.WebhookTarget{URL: "https://127.0.0.1:9443"})
	must(t, err)
	v, m := configs.Validating.Webhooks[0], configs.Mutating.Webhooks[0]
	if v.Name != "vconfigmap.kb.io" || *v.ClientConfig.URL != "https://127.0.0.1:9443/validate-v1-configmap" {
		t.Errorf("got validating webhook %s at %s, want vconfigmap.kb.io at its path", v.Name, *v.ClientConfig.URL)
	}
	if m.Name != "mconfigmap.kb.io" || *m.ClientConfig.URL != "https://127.0.0.1:9443/mutate--v1-configmap" {
		t.Errorf("got mutating webhook %s at %s, want mconfigmap.kb.io at the default path", m.Name, *m.ClientConfig.URL)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/validate-v1-configmap", bytes.NewReader(configMapReview(t, nil)))
	req.Header.Set("Content-Type", "application/json")
	mgr.WebhookHandler().ServeHTTP(rec, req)
	var review admissionv1.AdmissionReview
	must(t, json.Unmarshal(rec.Body.Bytes(), &review))
	if rec.Code != 200 || review.Response == nil || review.Response.Allowed {
		t.Errorf("at the chosen path: got %d %s, want the validator's denial", rec.Code, rec.Body)
	}
}
