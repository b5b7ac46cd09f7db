package integration_test

// What a kubebuilder operator relies on when it moves to ctrl, on the real
// API server: metrics served only to whom RBAC allows, webhooks that must
// be served, namespaced index lookups, objects that carry their kind, and a
// reconciled object's vanishing treated as routine.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// serviceAccount creates a ServiceAccount in ns and returns a token for it
// from the TokenRequest API, as a pod's projected token would be.
func serviceAccount(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	ttl := int64(600)
	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// grant binds a ClusterRole of rules to the ServiceAccount ns/name, until
// the test ends, and waits until the authorizer applies it to check.
func grant(t *testing.T, ns, name string, rules []rbacv1.PolicyRule, check authorizationv1.SubjectAccessReviewSpec) {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("%s-%s", ns, name)
	rbac := clientset.RbacV1()
	_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{}) })
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{}) })
	check.User = "system:serviceaccount:" + ns + ":" + name
	check.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	eventually(t, 30*time.Second, func() error {
		r, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: check}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			return fmt.Errorf("%s is not yet allowed %+v", check.User, check)
		}
		return nil
	})
}

// tokenConfig returns a client configuration of env's API server that
// authenticates with token.
func tokenConfig(token string) *rest.Config {
	admin := env.Config()
	return &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}, BearerToken: token, QPS: admin.QPS, Burst: admin.Burst}
}

// TestSecureMetrics runs a manager under a ServiceAccount with the rules
// the README gives for serving metrics, and scrapes it as Prometheus does:
// a token without the right to get /metrics is refused with 403, one with
// it is served, none is 401. A manager whose identity may not review
// tokens answers 500.
func TestSecureMetrics(t *testing.T) {
	ns := newNamespace(t)
	controller := serviceAccount(t, ns, "controller")
	scraper := serviceAccount(t, ns, "scraper")
	stranger := serviceAccount(t, ns, "stranger")
	grant(t, ns, "controller", []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	}, authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
		Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"}})
	grant(t, ns, "scraper", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}})
	createConfigMap(t, ns, "a")

	mgr, err := ctrl.NewManager(ctrl.Options{Config: tokenConfig(controller), Namespace: ns, MetricsAddress: "127.0.0.1:0"})
	must(t, err)
	_, err = ctrl.NewController(mgr, "scraped", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) { return ctrl.Result{}, nil },
		ctrl.ControllerOptions{})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)
	// Forbidden to review tokens: the manager cannot tell who asks.
	blind, err := ctrl.NewManager(ctrl.Options{Config: tokenConfig(stranger), Namespace: ns, MetricsAddress: "127.0.0.1:0"})
	must(t, err)
	start(t, blind)
	waitIdle(t, blind)

	// The self-signed certificate is not verified, as Prometheus'
	// insecure_skip_verify; the token is what counts.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec
	t.Cleanup(tr.CloseIdleConnections)                                            // before the managers stop
	get := func(m *ctrl.Manager, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "https://"+m.Addresses().Metrics+"/metrics", nil)
		must(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Do(req)
		must(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		must(t, err)
		return resp.StatusCode, string(body)
	}
	for _, tt := range []struct {
		name  string
		mgr   *ctrl.Manager
		token string
		code  int
		body  string
	}{
		{"no token", mgr, "", 401, "Unauthorized"},
		{"a token the server does not know", mgr, "not-a-token", 401, "Unauthorized"},
		{"a token without get on /metrics", mgr, stranger, 403, `Forbidden: user "system:serviceaccount:` + ns + `:stranger" may not get /metrics`},
		{"a token with get on /metrics", mgr, scraper, 200, `controller_runtime_reconcile_total{controller="scraped",result="success"} 1`},
		{"again, from the cache", mgr, scraper, 200, `controller_runtime_reconcile_total{controller="scraped",result="success"} 1`},
		{"a manager that may not review tokens", blind, scraper, 500, "Authentication failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := get(tt.mgr, tt.token); code != tt.code || !strings.Contains(body, tt.body) {
				t.Errorf("got %d %.300q, want %d with %q", code, body, tt.code, tt.body)
			}
		})
	}
}

// createConfigMap creates an empty ConfigMap with the test's own client.
func createConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := clientset.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	return cm
}

// TestWebhooksWithoutAddress checks that a manager with a webhook and no
// way to serve it fails to start, saying so, instead of leaving the API
// server to fail every request the webhook is configured for.
func TestWebhooksWithoutAddress(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	must(t, ctrl.Validate(mgr, ctrl.Validator[*Widget]{Create: func(context.Context, *Widget) error { return nil }}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := mgr.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "webhooks are registered (/validate-example-com-v1-widget) but nothing serves them: set Options.WebhookAddress") {
		t.Errorf("Start: got %v, want an error saying the webhooks are not served", err)
	}
}

// TestNamespacedIndexLookups has a ConfigMap named web in two namespaces,
// each controlling Deployments, and an index of the owned Deployments by
// their owner's name on the cache Owns returns: a lookup within a
// namespace finds only that namespace's children, one across all finds
// every one, and the index follows a new child.
func TestNamespacedIndexLookups(t *testing.T) {
	a, b := newNamespace(t), newNamespace(t)
	owners := map[string]*corev1.ConfigMap{a: createConfigMap(t, a, "web"), b: createConfigMap(t, b, "web")}
	createChild := func(ns, name string) {
		t.Helper()
		d := newDeployment(ns, name, 1)
		must(t, ctrl.SetControllerReference(owners[ns], d))
		_, err := clientset.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
		must(t, err)
	}
	createChild(a, "web-1")
	createChild(a, "web-2")
	createChild(b, "web-1")

	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	must(t, err)
	deployments := newClient[*appsv1.Deployment](t, mgr)
	var mu sync.Mutex
	counted := map[string]int{}
	c, err := ctrl.NewController(mgr, "web-owner", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		children, err := deployments.List(ctx, ctrl.ListParams{Namespace: cm.Namespace, Index: "owner", IndexValue: cm.Name})
		if err != nil {
			return ctrl.Result{}, err
		}
		mu.Lock()
		counted[cm.Namespace] = len(children)
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{a, b}}})
	must(t, err)
	owned, err := ctrl.Owns[*appsv1.Deployment](c)
	must(t, err)
	must(t, owned.AddIndex("owner", func(d *appsv1.Deployment) []string {
		if ref := metav1.GetControllerOfNoCopy(d); ref != nil && ref.Kind == "ConfigMap" {
			return []string{ref.Name}
		}
		return nil
	}))
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	check := func(want map[string]int, wantAll int) {
		t.Helper()
		mu.Lock()
		got := map[string]int{a: counted[a], b: counted[b]}
		mu.Unlock()
		if got[a] != want[a] || got[b] != want[b] {
			t.Errorf("reconciles counted %v children, want %v", got, want)
		}
		all, err := owned.ByIndex("", "owner", "web")
		must(t, err)
		if len(all) != wantAll {
			t.Errorf("across namespaces: got %d children, want %d", len(all), wantAll)
		}
		for ns, n := range want {
			list, err := deployments.List(ctx, ctrl.ListParams{Namespace: ns, Index: "owner", IndexValue: "web"})
			must(t, err)
			if len(list) != n || slices.ContainsFunc(list, func(d *appsv1.Deployment) bool { return d.Namespace != ns }) {
				t.Errorf("List in %s: got %d children, want %d of that namespace", ns, len(list), n)
			}
		}
	}
	check(map[string]int{a: 2, b: 1}, 3)

	createChild(b, "web-2") // reconciles b's web through Owns
	eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if counted[b] != 2 {
			return fmt.Errorf("the owner in %s counted %d children, want 2", b, counted[b])
		}
		return nil
	})
	waitIdle(t, mgr)
	check(map[string]int{a: 2, b: 2}, 4)
}

// TestTypeMetaRealServer checks that objects carry their apiVersion and
// kind from the cache, in reconcile, and from every client call, for a
// built-in type (protobuf on the wire) and a custom resource (JSON), where
// the server's typed decoding drops them; and that ReferenceOf names them.
func TestTypeMetaRealServer(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	widgets := newClient[*Widget](t, mgr)
	seen := make(chan metav1.TypeMeta, 100)
	_, err := ctrl.NewController(mgr, "kinds", func(_ context.Context, w *Widget) (ctrl.Result, error) {
		seen <- w.TypeMeta
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	cmCache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)

	cmKind := metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	wKind := metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"}
	check := func(what string, got, want metav1.TypeMeta) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
	}
	cm, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}})
	must(t, err)
	check("ConfigMap Create", cm.TypeMeta, cmKind)
	cm.Data = map[string]string{"k": "v"}
	cm, err = configMaps.Update(ctx, cm)
	must(t, err)
	check("ConfigMap Update", cm.TypeMeta, cmKind)
	cm, err = configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(`{"data":{"k":"w"}}`))
	must(t, err)
	check("ConfigMap Patch", cm.TypeMeta, cmKind)
	cm, err = configMaps.Apply(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Data: map[string]string{"applied": "yes"}}, ctrl.ApplyParams{})
	must(t, err)
	check("ConfigMap Apply", cm.TypeMeta, cmKind)
	w, err := widgets.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"}, Spec: WidgetSpec{Size: 1}})
	must(t, err)
	check("Widget Create", w.TypeMeta, wKind)
	w.Status.Phase = "Seen"
	w, err = widgets.UpdateStatus(ctx, w)
	must(t, err)
	check("Widget UpdateStatus", w.TypeMeta, wKind)
	waitIdle(t, mgr)

	for len(seen) > 0 {
		check("Widget in reconcile", <-seen, wKind)
	}
	cached, ok := cmCache.Get(ctrl.KeyOf(cm))
	if !ok {
		t.Fatal("the ConfigMap is not cached")
	}
	check("ConfigMap in the cache", cached.TypeMeta, cmKind)
	cm, err = configMaps.Get(ctx, ctrl.KeyOf(cm))
	must(t, err)
	check("ConfigMap Get", cm.TypeMeta, cmKind)
	cm, err = configMaps.Uncached().Get(ctx, ctrl.KeyOf(cm))
	must(t, err)
	check("ConfigMap uncached Get", cm.TypeMeta, cmKind)
	ws, err := widgets.Uncached().List(ctx, ctrl.ListParams{})
	must(t, err)
	check("Widget uncached List", ws[0].TypeMeta, wKind)
	ws, err = widgets.List(ctx, ctrl.ListParams{})
	must(t, err)
	check("Widget List", ws[0].TypeMeta, wKind)

	ref, err := ctrl.ReferenceOf(ws[0])
	must(t, err)
	if ref.APIVersion != "example.com/v1" || ref.Kind != "Widget" || ref.Namespace != ns || ref.Name != "w" || ref.UID != ws[0].UID ||
		ref.UID == "" || ref.ResourceVersion != ws[0].ResourceVersion {
		t.Errorf("got reference %+v, want the Widget's kind, key, uid and resourceVersion", ref)
	}
}

// TestNotFoundOnOwnStatusWrite deletes a Widget while it is reconciled,
// before the reconcile writes its status: the NotFound ends the reconcile
// with no retry, no error log line and no error metric. A NotFound that
// is not the object's (a status subresource its resource lacks) is still
// an error, retried.
func TestNotFoundOnOwnStatusWrite(t *testing.T) {
	ns := newNamespace(t)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{Verbosity: 1})
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, Logger: log})
	must(t, err)
	widgets := newClient[*Widget](t, mgr)
	var calls atomic.Int32
	_, err = ctrl.NewController(mgr, "vanishing", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		calls.Add(1)
		// Someone else deletes it, after the cache handed it over.
		if err := clientset.CoreV1().RESTClient().Delete().AbsPath("/apis/example.com/v1/namespaces", ns, "widgets", w.Name).
			Do(ctx).Error(); err != nil {
			return ctrl.Result{}, err
		}
		w = w.DeepCopyObject().(*Widget)
		w.Status.Phase = "Ready"
		_, err := widgets.UpdateStatus(ctx, w)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)

	// Sprockets have no status subresource, but an unstructured client is
	// told they have: its status writes get the server's 404.
	must(t, env.InstallCRDs([]byte(sprocketCRD)))
	sprocketStatus, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: ctrl.APIResource{
		Group: "example.com", Version: "v1", Resource: "sprockets", Kind: "Sprocket", Namespaced: true, Status: true}})
	must(t, err)
	var sprocketCalls atomic.Int32
	_, err = ctrl.NewController(mgr, "misconfigured", func(ctx context.Context, s *Sprocket) (ctrl.Result, error) {
		if sprocketCalls.Add(1) > 1 {
			return ctrl.Result{}, nil
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("example.com/v1")
		u.SetKind("Sprocket")
		u.SetNamespace(s.Namespace)
		u.SetName(s.Name)
		u.SetResourceVersion(s.ResourceVersion)
		_, err := sprocketStatus.UpdateStatus(ctx, u)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{RateLimiter: ctrl.DefaultRateLimiter()})
	must(t, err)
	sprockets := newClient[*Sprocket](t, mgr)
	start(t, mgr)

	ctx := context.Background()
	_, err = widgets.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}, Spec: WidgetSpec{Size: 1}})
	must(t, err)
	_, err = sprockets.Create(ctx, &Sprocket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}})
	must(t, err)
	waitIdle(t, mgr)

	if _, err := widgets.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "gone"}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Widget: got %v, want it deleted", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the vanished Widget was reconciled %d times, want once", n)
	}
	if n := sprocketCalls.Load(); n != 2 {
		t.Errorf("the Sprocket whose status write failed was reconciled %d times, want twice (a retry)", n)
	}
	reg := mgr.Registry()
	families, err := reg.Gather()
	must(t, err)
	errorsOf := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			errorsOf[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if errorsOf["vanishing"] != 0 || errorsOf["misconfigured"] != 1 {
		t.Errorf("got reconcile errors %v, want none for vanishing and one for misconfigured", errorsOf)
	}
	mu.Lock()
	defer mu.Unlock()
	var quiet, failedVanishing, failedMisconfigured bool
	for _, l := range lines {
		vanishing := strings.Contains(l, `"controller"="vanishing"`)
		quiet = quiet || vanishing && strings.Contains(l, `"msg"="the object was deleted during its reconcile; not retrying"`)
		failed := strings.Contains(l, `"msg"="reconcile failed`)
		failedVanishing = failedVanishing || vanishing && failed
		failedMisconfigured = failedMisconfigured || strings.Contains(l, `"controller"="misconfigured"`) && failed
	}
	if !quiet || failedVanishing || !failedMisconfigured {
		t.Errorf("got a V(1) line for the vanished Widget %v, an error line for it %v, an error line for the Sprocket %v; want true, false, true:\n%s",
			quiet, failedVanishing, failedMisconfigured, strings.Join(lines, "\n"))
	}
}
