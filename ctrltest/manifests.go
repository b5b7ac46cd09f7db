package ctrltest

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/builtin"
	"github.com/typedctrl/ctrl/internal/manifests"
	"github.com/typedctrl/ctrl/internal/webhook"
)

// Deployment says how a program runs in a cluster, for [Manifests]. The
// zero value of each field but Name and Setup means its default.
type Deployment struct {
	// Name names the Deployment and its ServiceAccount, and starts the names
	// of its roles, bindings, Services and certificate, such as
	// "backup-operator". Required.
	Name string
	// Namespace is where the program runs. Default: Name + "-system".
	Namespace string
	// Image is the container's image. Default: "controller:latest", which
	// a scaffolded module's `make deploy IMG=...` replaces.
	Image string
	// Args are the container's arguments: the program's flags that make
	// it run with Options. Default: none.
	Args []string
	// Replicas of the Deployment. Default: 1.
	Replicas int32
	// Resources of the container. Default: requests of 10m CPU and 64Mi of
	// memory, limits of 500m and 128Mi, as kubebuilder's.
	Resources corev1.ResourceRequirements
	// Options are the manager's, as the program sets them; Config and the
	// fakes are replaced, since the manager is wired with no API server.
	// They give the ports (MetricsAddress, HealthAddress, WebhookAddress),
	// where the webhook certificate is mounted (WebhookCertDir), and where
	// the rules apply: with Namespace, a Role in it for namespaced
	// resources; Leases in LeaseOptions.Namespace, or Namespace, or the
	// program's own namespace, which is the default in a pod.
	Options ctrl.Options
	// Setup wires the manager as the program does. Required.
	Setup func(*ctrl.Manager) error
	// WebhookSecret keeps the webhook certificate in a Secret written with
	// the manifests (a CA and a serving certificate, valid a year and kept
	// from one run to the next until 30 days before they expire), its CA in
	// the webhook configurations. Default: cert-manager issues it (an
	// Issuer and a Certificate) and injects its CA.
	WebhookSecret bool
}

// manifestsEnv, set to "write", makes Manifests write the files instead of
// comparing them.
const manifestsEnv = "CTRL_MANIFESTS"

// Manifests checks that dir holds the manifests that deploy d, and fails
// tb naming each file that differs, is missing, or was written by an
// earlier run and is no longer wanted. With $CTRL_MANIFESTS=write it
// writes them instead (`make manifests` in a scaffolded module). dir is
// usually the module's config directory, laid out as kubebuilder's:
//
//	crd/         the CRDs of the types the wiring uses, registered with
//	             ctrl.APIResource.CRD, from packages of the main module
//	rbac/        the ServiceAccount; ctrl.Manager.RBACRules as a ClusterRole
//	             (or, with Options.Namespace, a Role there and a
//	             ClusterRole for cluster-scoped resources), the Leases' rules
//	             as a Role in their namespace, the reviews of secure metrics
//	             as a ClusterRole, each bound to the ServiceAccount; and a
//	             ClusterRole to get /metrics, for a scraper to bind
//	manager/     the Namespace (Pod Security "restricted"), the Deployment
//	             (probes on HealthAddress, the ports, non-root, read-only
//	             root filesystem, no privilege escalation, resource
//	             requests), the metrics Service
//	webhook/     the webhook Service and configurations, and with
//	             WebhookSecret the certificate's Secret
//	certmanager/ the Issuer and Certificate of the webhooks, otherwise
//	default/     a kustomization of all the above:
//	             `kubectl apply -k config/default`
//
// Every object names its namespace, so the kustomizations only list files.
// Each file starts with a comment saying it is written; files without it
// are the user's and are left alone. Manifests wires a manager with no API
// server: a custom resource the wiring uses must be registered with its
// CRD (ctrl.APIResource.CRD) or a declared scope. It does not block beyond
// the wiring, and does not start the manager.
func Manifests(tb testing.TB, dir string, d Deployment) {
	tb.Helper()
	var old map[string][]byte // the files now, for the Secret to keep
	if d.WebhookSecret {
		old = readSecret(dir)
	}
	files, err := buildManifests(d, old)
	if err != nil {
		tb.Fatalf("ctrltest: Manifests: %v", err)
	}
	written, err := writtenFiles(dir)
	if err != nil {
		tb.Fatalf("ctrltest: Manifests: %v", err)
	}
	var stale, gone []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, files[name]) {
			stale = append(stale, name)
		}
	}
	for _, name := range written {
		if _, ok := files[name]; !ok {
			gone = append(gone, name)
		}
	}
	if os.Getenv(manifestsEnv) == "write" {
		for _, name := range stale {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tb.Fatal(err)
			}
			if err := os.WriteFile(p, files[name], 0o644); err != nil {
				tb.Fatal(err)
			}
		}
		for _, name := range gone {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
				tb.Fatal(err)
			}
		}
		tb.Logf("ctrltest: Manifests: %d files in %s, %d written, %d removed", len(files), dir, len(stale), len(gone))
		return
	}
	if len(stale)+len(gone) > 0 {
		var b strings.Builder
		for _, name := range stale {
			fmt.Fprintf(&b, "\n  %s: %s", name, firstDifference(filepath.Join(dir, name), files[name]))
		}
		for _, name := range gone {
			fmt.Fprintf(&b, "\n  %s: no longer wanted", name)
		}
		tb.Errorf("ctrltest: Manifests: %s is not what the wiring needs; write it with `make manifests`, or %s=write go test -run '^%s$':%s",
			dir, manifestsEnv, tb.Name(), b.String())
	}
}

// buildManifests wires a manager as d says, offline, and returns its
// manifests; old holds the Secret of an earlier run, to keep.
func buildManifests(d Deployment, old map[string][]byte) (map[string][]byte, error) {
	if d.Name == "" || d.Setup == nil {
		return nil, errors.New("set Deployment.Name and Deployment.Setup")
	}
	opts := d.Options
	opts.Config = &rest.Config{Host: "https://apiserver.invalid", Transport: binding.Offline{}}
	opts.FakeClientset, opts.FakeDynamic = nil, nil
	opts.Registerer = nil
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		return nil, err
	}
	if err := d.Setup(mgr); err != nil {
		return nil, fmt.Errorf("wiring with no API server: %w", err)
	}
	w := manifests.Wiring{
		Name:           d.Name,
		Namespace:      cmp.Or(d.Namespace, d.Name+"-system"),
		Image:          cmp.Or(d.Image, "controller:latest"),
		Args:           d.Args,
		Replicas:       cmp.Or(d.Replicas, 1),
		Resources:      d.Resources,
		Rules:          mgr.RBACRules(),
		Namespaced:     namespaced,
		WatchNamespace: opts.Namespace,
		MetricsSecure:  !opts.MetricsServing.Insecure,
		WebhookCertDir: cmp.Or(opts.WebhookCertDir, "/tmp/k8s-webhook-server/serving-certs"),
		CertManager:    !d.WebhookSecret,
		GracePeriod:    int64((cmp.Or(opts.ShutdownTimeout, 30*time.Second) + 15*time.Second) / time.Second),
	}
	if reflect.DeepEqual(w.Resources, corev1.ResourceRequirements{}) {
		w.Resources = manifests.DefaultResources()
	}
	switch {
	case opts.LeaderElection.Name != "":
		w.LeaseNamespace = cmp.Or(opts.LeaderElection.Namespace, opts.Namespace, w.Namespace)
	case opts.Sharding.Ring != "":
		w.LeaseNamespace = cmp.Or(opts.Sharding.Namespace, opts.Namespace, w.Namespace)
	}
	for _, p := range []struct {
		port    *int32
		address string
	}{{&w.MetricsPort, opts.MetricsAddress}, {&w.HealthPort, opts.HealthAddress}, {&w.WebhookPort, opts.WebhookAddress}} {
		if *p.port, err = manifests.Port(p.address); err != nil {
			return nil, err
		}
	}
	if err := webhooks(mgr, &w, old); err != nil {
		return nil, err
	}
	w.CRDs = crdsOf(w)
	return manifests.Build(w)
}

// webhooks fills in the webhook configurations, pointing at the webhook
// Service, and the Secret of their certificate.
func webhooks(mgr *ctrl.Manager, w *manifests.Wiring, old map[string][]byte) error {
	target := ctrl.WebhookTarget{Service: manifests.WebhookService(w.Name, w.Namespace)}
	if !w.CertManager {
		ca, cert, key := old["ca.crt"], old["tls.crt"], old["tls.key"]
		if !lasting(cert, manifests.DNSNames(w.Name, w.Namespace)) {
			var err error
			if ca, cert, key, err = webhook.SelfSigned(manifests.DNSNames(w.Name, w.Namespace)...); err != nil {
				return err
			}
		}
		w.Secret = manifests.SecretFor(w.Name, w.Namespace, ca, cert, key)
		target.CABundle = ca
	}
	configs, err := mgr.WebhookConfigurations(w.Name, target)
	if err != nil {
		return err
	}
	if configs.Validating == nil && configs.Mutating == nil && len(configs.Conversions) == 0 {
		w.Secret = nil
		return nil
	}
	if w.WebhookPort == 0 {
		return errors.New("the wiring registers webhooks, but Options.WebhookAddress is not set: set it, such as \":9443\"")
	}
	w.Validating, w.Mutating = configs.Validating, configs.Mutating
	for name, conv := range configs.Conversions {
		var m any
		data, err := json.Marshal(conv)
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		if err != nil {
			return err
		}
		if w.Conversions == nil {
			w.Conversions = map[string]any{}
		}
		w.Conversions[name] = m
	}
	return nil
}

// lasting reports whether the PEM certificate is valid for names for more
// than 30 days.
func lasting(certPEM []byte, names []string) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || time.Until(cert.NotAfter) < 30*24*time.Hour {
		return false
	}
	for _, n := range names {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// readSecret returns the data of the webhook Secret an earlier run wrote
// into dir, or nil.
func readSecret(dir string) map[string][]byte {
	data, err := os.ReadFile(filepath.Join(dir, "webhook", "secret.yaml"))
	if err != nil {
		return nil
	}
	var s corev1.Secret
	if yaml.Unmarshal(bytes.TrimPrefix(data, []byte(manifests.Header)), &s) != nil {
		return nil
	}
	return s.Data
}

// crdsOf returns the CRD manifests of the types registered with one whose
// resources the wiring uses (its rules, its webhooks), defined in the main
// module: another project's types are installed by that project.
func crdsOf(w manifests.Wiring) [][]byte {
	used := map[schema.GroupResource]bool{}
	for _, r := range w.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				base, _, _ := strings.Cut(res, "/")
				used[schema.GroupResource{Group: g, Resource: base}] = true
			}
		}
	}
	if w.Validating != nil {
		for _, wh := range w.Validating.Webhooks {
			for _, r := range wh.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						used[schema.GroupResource{Group: g, Resource: res}] = true
					}
				}
			}
		}
	}
	if w.Mutating != nil {
		for _, wh := range w.Mutating.Webhooks {
			for _, r := range wh.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						used[schema.GroupResource{Group: g, Resource: res}] = true
					}
				}
			}
		}
	}
	main := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		main = bi.Main.Path
	}
	var out [][]byte
	for _, info := range binding.Registered() {
		crd := binding.CRD(info.Type)
		pkg := info.Type.Elem().PkgPath()
		own := main == "" || pkg == main || strings.HasPrefix(pkg, main+"/")
		if crd == nil || !own || !used[info.GVR.GroupResource()] && w.Conversions[info.GVR.Resource+"."+info.GVR.Group] == nil {
			continue
		}
		if !slices.ContainsFunc(out, func(b []byte) bool { return bytes.Equal(b, crd) }) {
			out = append(out, crd)
		}
	}
	return out
}

// namespaced tells the scope of a resource from the built-in table and the
// registrations; an unknown resource is taken as cluster-scoped.
func namespaced(gr schema.GroupResource) bool {
	for r := range builtin.All() {
		if r.Group == gr.Group && r.Resource == gr.Resource {
			return r.Namespaced
		}
	}
	for _, info := range binding.Registered() {
		if info.GVR.GroupResource() == gr {
			return info.Namespaced && !info.ScopeUnknown
		}
	}
	return false
}

// writtenFiles returns the files under dir that start with the header,
// as slash-separated paths relative to dir.
func writtenFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(data, []byte(manifests.Header)) {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}

// firstDifference says where a file differs from want.
func firstDifference(path string, want []byte) string {
	got, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return err.Error()
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, want %q", i+1, gl, wl)
		}
	}
	return "differs"
}
