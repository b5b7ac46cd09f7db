package scaffold_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/internal/scaffold"
)

// The module the test scaffolds, and what its manifests name.
const (
	module    = "example.com/backup-operator"
	name      = "backup-operator"
	namespace = "backup-operator-system"
	group     = "backup.example.com"
)

var backups = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "backups"}

// TestScaffold does what a new user does, from an empty directory to an
// operator running in a cluster: it scaffolds a module for a namespaced
// kind, runs its tests (its `make test` less the Makefile), builds its
// program, applies its manifests (config/default) to a real API server,
// and runs the program as the ServiceAccount they create, with a token
// from the TokenRequest API as a pod's would be, through the scaffold's
// scenario: a Backup gets its ConfigMap, an Event and a Ready condition,
// follows a change of its message, and goes, its finalizer deleting the
// ConfigMap; a scraper whose ServiceAccount is bound to the metrics
// reader's ClusterRole gets /metrics. Then the rules are exactly enough:
// with each rule of the manager's roles removed in turn, /readyz names it.
// Last, it adds a cluster-scoped kind and webhooks, whose tests pass too.
func TestScaffold(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	began := time.Now()
	run := scaffold.Exec(&testWriter{t: t})
	env := []string{"GOWORK=off", "GOFLAGS=-buildvcs=false"}
	runEnv := func(c scaffold.Command) error {
		c.Env = append(slices.Clone(env), c.Env...)
		return run(c)
	}
	k := scaffold.Kind{Group: group, Version: "v1", Kind: "Backup", Namespaced: true}
	if err := scaffold.Init(dir, module, k, scaffold.Ctrl{Version: "v0.0.0-00010101000000-000000000000", Replace: root}, runEnv); err != nil {
		t.Fatal(err)
	}
	t.Logf("scaffolded in %s", time.Since(began).Round(100*time.Millisecond))
	for _, args := range [][]string{
		{"go", "vet", "./..."},
		{"go", "test", "-race", "-short", "-count=1", "./..."},
		// -race: the tests compiled its dependencies so, and a race would fail the run.
		{"go", "build", "-race", "-o", "bin/manager", "./cmd"},
	} {
		step := time.Now()
		if err := runEnv(scaffold.Command{Dir: dir, Args: args}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", strings.Join(args, " "), time.Since(step).Round(100*time.Millisecond))
	}

	cp := ctrltest.Start(t, ctrltest.Options{})
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	apply(t, cp, filepath.Join(dir, "config", "default"))
	kubeconfig := tokenKubeconfig(t, cp, cs, namespace, name)
	scraper := scraperToken(t, cs)

	o := &operator{t: t, bin: filepath.Join(dir, "bin", "manager"), kubeconfig: kubeconfig, cs: cs, scraper: scraper}
	o.dyn, err = dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("scenario", func(t *testing.T) {
		o.t = t
		o.start()
		defer o.stop()
		o.scenario("scenario")
		if code, body := o.readyz(); code != http.StatusOK || strings.Contains(body, "forbidden") {
			t.Errorf("/readyz: got %d %q, want 200 without refusals", code, body)
		}
	})

	// Every rule of a role bound to the ServiceAccount, removed in turn.
	for _, role := range boundRoles(t, filepath.Join(dir, "config", "rbac")) {
		for i, rule := range role.rules {
			id := fmt.Sprintf("%s/%s", role.name, strings.Join(rule.Resources, ","))
			t.Run("without "+id, func(t *testing.T) {
				o.t = t
				role.set(t, cs, slices.Delete(slices.Clone(role.rules), i, i+1))
				defer role.set(t, cs, role.rules)
				o.start()
				defer o.stop()
				want := fmt.Sprintf(`{apiGroups: [%q], resources: [%q]`, rule.APIGroups[0], rule.Resources[0])
				ns := o.namespace("without")
				o.create(ns)
				o.scrape() // the reviews of secure metrics
				deadline := time.Now().Add(time.Minute)
				for {
					code, body := o.readyz()
					if strings.Contains(body, want) {
						t.Logf("/readyz (%d) names it:\n%s", code, body)
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("/readyz: got %d %q, want it to name %s", code, body, want)
					}
					time.Sleep(200 * time.Millisecond)
					o.scrape()
				}
				o.forget(ns)
			})
		}
	}

	// The other two commands: a cluster-scoped kind, and webhooks. What
	// they write passes vet and its own tests, and config/ follows.
	t.Run("kind and webhook", func(t *testing.T) {
		step := time.Now()
		if err := scaffold.AddKind(dir, scaffold.Kind{Group: group, Version: "v1", Kind: "Schedule", Namespaced: false}, runEnv); err != nil {
			t.Fatal(err)
		}
		if err := scaffold.AddWebhook(dir, "Backup", "", runEnv); err != nil {
			t.Fatal(err)
		}
		t.Logf("scaffold kind, webhook: %s", time.Since(step).Round(100*time.Millisecond))
		for _, f := range []string{"config/crd/bases/backup.example.com_schedules.yaml", "config/webhook/manifests.yaml", "config/certmanager/certificate.yaml"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Error(err)
			}
		}
		for _, args := range [][]string{
			{"go", "vet", "./..."},
			{"go", "test", "-race", "-short", "-count=1", "-run", "Schedule|Webhooks|Manifests", "./..."},
		} {
			step := time.Now()
			if err := runEnv(scaffold.Command{Dir: dir, Args: args}); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", strings.Join(args, " "), time.Since(step).Round(100*time.Millisecond))
		}
	})
	t.Logf("in all: %s", time.Since(began).Round(time.Second))
}

// operator runs the scaffolded program as its ServiceAccount.
type operator struct {
	t          *testing.T
	bin        string
	kubeconfig string
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	scraper    string

	cmd            *exec.Cmd
	log            *syncBuffer
	health, metric string
}

// start runs the program with the Deployment's defaults, but for the
// addresses, on loopback, and the Lease's namespace, which in a pod it
// reads from its service account; and waits until it is ready or names a
// refusal.
func (o *operator) start() {
	o.t.Helper()
	o.health, o.metric = freeAddress(o.t), freeAddress(o.t)
	o.log = &syncBuffer{}
	o.cmd = exec.Command(o.bin, "-kubeconfig", o.kubeconfig, "-health-address", o.health, "-metrics-address", o.metric, "-lease-namespace", namespace)
	o.cmd.Stdout, o.cmd.Stderr = o.log, o.log
	if err := o.cmd.Start(); err != nil {
		o.t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := o.readyz()
		if code == http.StatusOK || strings.Contains(body, "forbidden") {
			return
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("the program is not ready after a minute: /readyz %d %q\n%s", code, body, o.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM, as the kubelet does, and waits for a clean exit,
// which releases the Lease for the next start.
func (o *operator) stop() {
	o.t.Helper()
	if err := o.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		o.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- o.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			o.t.Errorf("the program exited with %v\n%s", err, o.log)
		}
	case <-time.After(time.Minute):
		_ = o.cmd.Process.Kill()
		<-done
		o.t.Errorf("the program did not stop within a minute of SIGTERM\n%s", o.log)
	}
	if o.t.Failed() {
		o.t.Logf("the program's log:\n%s", o.log)
	}
}

func (o *operator) readyz() (int, string) {
	resp, err := http.Get("http://" + o.health + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scrape gets /metrics as Prometheus does, with its ServiceAccount's
// token, and returns the status.
func (o *operator) scrape() int {
	req, err := http.NewRequest(http.MethodGet, "https://"+o.metric+"/metrics", nil)
	if err != nil {
		o.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+o.scraper)
	// The certificate is self-signed: Prometheus skips its verification too.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second} //nolint:gosec
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func (o *operator) namespace(prefix string) string {
	o.t.Helper()
	ns, err := o.cs.CoreV1().Namespaces().Create(o.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		o.t.Fatal(err)
	}
	return ns.Name
}

func (o *operator) create(ns string) {
	o.t.Helper()
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1", "kind": "Backup",
		"metadata": map[string]any{"name": "example"},
		"spec":     map[string]any{"message": "hello"},
	}}
	if _, err := o.dyn.Resource(backups).Namespace(ns).Create(o.t.Context(), b, metav1.CreateOptions{}); err != nil {
		o.t.Fatal(err)
	}
}

// forget deletes a Backup that a program short of a rule may have left
// with its finalizer.
func (o *operator) forget(ns string) {
	ctx := o.t.Context()
	_, _ = o.dyn.Resource(backups).Namespace(ns).Patch(ctx, "example", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	_ = o.dyn.Resource(backups).Namespace(ns).Delete(ctx, "example", metav1.DeleteOptions{})
}

// eventually polls check until it returns nil, or fails the test after a
// minute with its last error.
func (o *operator) eventually(what string, check func() error) {
	o.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("%s: %v\nthe program's log:\n%s", what, err, o.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scenario runs the scaffold's scenario against the running program.
func (o *operator) scenario(prefix string) {
	o.t.Helper()
	ctx := o.t.Context()
	ns := o.namespace(prefix)
	o.create(ns)
	configMap := func(want string) func() error {
		return func() error {
			cm, err := o.cs.CoreV1().ConfigMaps(ns).Get(ctx, "example-backup", metav1.GetOptions{})
			if err == nil && cm.Data["message"] != want {
				err = fmt.Errorf("the ConfigMap holds %v, want message %q", cm.Data, want)
			}
			return err
		}
	}
	o.eventually("the Backup's ConfigMap", configMap("hello"))
	o.eventually("the Backup's Ready condition", func() error {
		b, err := o.dyn.Resource(backups).Namespace(ns).Get(ctx, "example", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(b.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Ready" && c["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v, want Ready", conds)
	})
	o.eventually("the Backup's Event", func() error {
		list, err := o.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			err = errors.New("no Event")
		}
		return err
	})
	if _, err := o.dyn.Resource(backups).Namespace(ns).Patch(ctx, "example", types.MergePatchType, []byte(`{"spec":{"message":"bye"}}`), metav1.PatchOptions{}); err != nil {
		o.t.Fatal(err)
	}
	o.eventually("the changed message in the ConfigMap", configMap("bye"))
	if code := o.scrape(); code != http.StatusOK {
		o.t.Errorf("scraping /metrics as the metrics reader: got %d, want 200", code)
	}
	if err := o.dyn.Resource(backups).Namespace(ns).Delete(ctx, "example", metav1.DeleteOptions{}); err != nil {
		o.t.Fatal(err)
	}
	o.eventually("the Backup's deletion, through its finalizer", func() error {
		_, err := o.dyn.Resource(backups).Namespace(ns).Get(ctx, "example", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = o.cs.CoreV1().ConfigMaps(ns).Get(ctx, "example-backup", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the ConfigMap is still there (%v)", err)
		}
		return fmt.Errorf("the Backup is still there (%v)", err)
	})
}

// role is a Role or ClusterRole of the manifests and its rules.
type role struct {
	name, namespace string
	rules           []rbacv1.PolicyRule
}

// set writes rules into the role. The program started next meets them:
// the authorizer follows roles by watching them.
func (r role) set(t *testing.T, cs kubernetes.Interface, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	var err error
	if r.namespace == "" {
		var cr *rbacv1.ClusterRole
		if cr, err = cs.RbacV1().ClusterRoles().Get(ctx, r.name, metav1.GetOptions{}); err == nil {
			cr.Rules = rules
			_, err = cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
		}
	} else {
		var ro *rbacv1.Role
		if ro, err = cs.RbacV1().Roles(r.namespace).Get(ctx, r.name, metav1.GetOptions{}); err == nil {
			ro.Rules = rules
			_, err = cs.RbacV1().Roles(r.namespace).Update(ctx, ro, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// boundRoles reads the roles of dir whose files bind them.
func boundRoles(t *testing.T, dir string) []role {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []role
	for _, f := range files {
		objs := read(t, f)
		if len(objs) != 2 { // a role and its binding; the metrics reader is for scrapers to bind
			continue
		}
		var r struct {
			Metadata metav1.ObjectMeta   `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
		}
		data, _ := objs[0].MarshalJSON()
		if err := yaml.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, role{name: r.Metadata.Name, namespace: r.Metadata.Namespace, rules: r.Rules})
	}
	if len(out) == 0 {
		t.Fatalf("no bound role in %s", dir)
	}
	return out
}

// apply creates what the kustomization in dir lists, as `kubectl apply -k`
// would: the Namespace and the CRDs first, then the rest. No kubelet runs,
// so the Deployment's pods never start: the test runs the program itself.
func apply(t *testing.T, cp *ctrltest.Env, dir string) {
	t.Helper()
	var objs []*unstructured.Unstructured
	var walk func(dir string)
	walk = func(dir string) {
		var k struct {
			Resources []string `json:"resources"`
		}
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				walk(p)
			} else {
				objs = append(objs, read(t, p)...)
			}
		}
	}
	walk(dir)
	ctx := t.Context()
	var crds [][]byte
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			data, _ := o.MarshalJSON()
			crds = append(crds, data)
		}
	}
	if err := cp.InstallCRDs(crds...); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		rank := func(o *unstructured.Unstructured) int {
			if o.GetKind() == "Namespace" {
				return 0
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			continue
		}
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// read returns the objects of a YAML file.
func read(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var o map[string]any
		if err := d.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(o) > 0 {
			out = append(out, &unstructured.Unstructured{Object: o})
		}
	}
}

// tokenKubeconfig writes a kubeconfig for the ServiceAccount ns/name with
// a token from the TokenRequest API, as a pod's projected token would be.
func tokenKubeconfig(t *testing.T, cp *ctrltest.Env, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	token := requestToken(t, cs, ns, name)
	admin := cp.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: name}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func requestToken(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ttl := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// scraperToken returns the token of a ServiceAccount bound to the metrics
// reader's ClusterRole, as a Prometheus would be.
func scraperToken(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ctx := t.Context()
	const ns = "monitoring"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return requestToken(t, cs, ns, "prometheus")
}

// freeAddress returns a loopback address with a port free now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// testWriter logs what the scaffold prints, a line at a time.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// syncBuffer is a bytes.Buffer for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
