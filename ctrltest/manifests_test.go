package ctrltest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// Backup is a custom resource registered with its CRD manifest, as a
// scaffolded module's types are.
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            struct {
		Phase string `json:"phase,omitempty"`
	} `json:"status,omitempty"`
}

func (b *Backup) DeepCopyObject() runtime.Object {
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

const backupCRD = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: backups.example.com
spec:
  group: example.com
  names: {kind: Backup, listKind: BackupList, plural: backups, singular: backup}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources: {status: {}}
`

func init() { ctrl.MustRegister[*Backup](ctrl.APIResource{CRD: []byte(backupCRD)}) }

// setupBackups wires a Backup controller that owns ConfigMaps and writes
// its status and Events; setupBackupWebhooks, its validating webhook too.
func setupBackups(mgr *ctrl.Manager) error {
	c, err := ctrl.NewController(mgr, "backup", func(context.Context, *Backup) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	if err != nil {
		return err
	}
	if err := c.OnFinalize("example.com/cleanup", func(context.Context, *Backup) error { return nil }); err != nil {
		return err
	}
	if _, err := ctrl.Owns[*corev1.ConfigMap](c); err != nil {
		return err
	}
	if _, err := ctrl.NewRecorder[*Backup](mgr, "backup"); err != nil {
		return err
	}
	mgr.AddRBACRules(
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"example.com"}, Resources: []string{"backups/status"}, Verbs: []string{"update"}},
	)
	return nil
}

func setupBackupWebhooks(mgr *ctrl.Manager) error {
	if err := setupBackups(mgr); err != nil {
		return err
	}
	return ctrl.Validate(mgr, ctrl.Validator[*Backup]{Create: func(context.Context, *Backup) error { return nil }})
}

func backupDeployment() ctrltest.Deployment {
	return ctrltest.Deployment{
		Name:  "backup-operator",
		Args:  []string{"-leader-elect"},
		Setup: setupBackupWebhooks,
		Options: ctrl.Options{
			LeaderElection: ctrl.LeaderElection{Name: "backup-operator"},
			MetricsAddress: ":8443",
			HealthAddress:  ":8081",
			WebhookAddress: ":9443",
		},
	}
}

// TestManifests writes the manifests of a Backup operator, checks what
// they say, and that a second run finds them current; then that a changed
// file and a file no longer wanted are found, and written over.
func TestManifests(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CTRL_MANIFESTS", "write")
	ctrltest.Manifests(t, dir, backupDeployment())
	var files []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	want := []string{
		"certmanager/certificate.yaml", "certmanager/kustomization.yaml",
		"crd/bases/example.com_backups.yaml", "crd/kustomization.yaml",
		"default/kustomization.yaml",
		"manager/kustomization.yaml", "manager/manager.yaml", "manager/metrics_service.yaml",
		"rbac/kustomization.yaml", "rbac/leader_election_role.yaml", "rbac/manager_role.yaml",
		"rbac/metrics_auth_role.yaml", "rbac/metrics_reader_role.yaml", "rbac/service_account.yaml",
		"webhook/kustomization.yaml", "webhook/manifests.yaml", "webhook/service.yaml",
	}
	if !slices.Equal(files, want) {
		t.Fatalf("files:\n got %q\nwant %q", files, want)
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tt := range []struct{ file, want string }{
		{"rbac/manager_role.yaml", `- apiGroups:
  - ""
  resources:
  - configmaps
  verbs:
  - create
  - delete
  - list
  - update
  - watch
`},
		{"rbac/manager_role.yaml", "  - backups/status\n  verbs:\n  - update\n"},
		{"rbac/manager_role.yaml", "kind: ClusterRoleBinding"},
		{"rbac/leader_election_role.yaml", "kind: Role\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: ctrl\n    app.kubernetes.io/part-of: backup-operator\n  name: backup-operator-leader-election\n  namespace: backup-operator-system\n"},
		{"manager/manager.yaml", "pod-security.kubernetes.io/enforce: restricted"},
		{"manager/manager.yaml", "readOnlyRootFilesystem: true"},
		{"manager/manager.yaml", "allowPrivilegeEscalation: false"},
		{"manager/manager.yaml", "path: /readyz"},
		{"manager/manager.yaml", "mountPath: /tmp/k8s-webhook-server/serving-certs"},
		{"manager/manager.yaml", "terminationGracePeriodSeconds: 45"},
		{"webhook/manifests.yaml", "cert-manager.io/inject-ca-from: backup-operator-system/backup-operator-serving-cert"},
		{"webhook/manifests.yaml", "      name: backup-operator-webhook\n      namespace: backup-operator-system\n      path: /validate-example-com-v1-backup\n"},
		{"crd/bases/example.com_backups.yaml", backupCRD},
		{"default/kustomization.yaml", "resources:\n- ../crd\n- ../rbac\n- ../manager\n- ../certmanager\n- ../webhook\n"},
	} {
		if got := read(tt.file); !strings.Contains(got, tt.want) {
			t.Errorf("%s:\n%s\nwant it to contain:\n%s", tt.file, got, tt.want)
		}
	}

	t.Setenv("CTRL_MANIFESTS", "")
	ctrltest.Manifests(t, dir, backupDeployment()) // current: passes

	if err := os.WriteFile(filepath.Join(dir, "rbac/manager_role.yaml"), []byte(strings.Replace(read("rbac/manager_role.yaml"), "  - delete\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := backupDeployment() // the same wiring without its webhook: the webhook files go
	d.Options.WebhookAddress, d.Setup = "", setupBackups
	rec := &errorsTB{TB: t}
	ctrltest.Manifests(rec, dir, d)
	for _, want := range []string{
		"is not what the wiring needs; write it with `make manifests`, or CTRL_MANIFESTS=write go test -run '^TestManifests$'",
		`rbac/manager_role.yaml: line 18 is "  - list", want "  - delete"`,
		"webhook/manifests.yaml: no longer wanted",
		"certmanager/certificate.yaml: no longer wanted",
	} {
		if !strings.Contains(rec.errors(), want) {
			t.Errorf("got errors:\n%s\nwant one containing %q", rec.errors(), want)
		}
	}
	t.Setenv("CTRL_MANIFESTS", "write")
	ctrltest.Manifests(t, dir, d)
	if _, err := os.Stat(filepath.Join(dir, "webhook")); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "webhook/manifests.yaml")); err == nil {
			t.Error("webhook/manifests.yaml is still there, want it removed")
		}
	}
	if got := read("rbac/manager_role.yaml"); !strings.Contains(got, "  - delete\n") {
		t.Errorf("rbac/manager_role.yaml was not written over:\n%s", got)
	}
}

// errorsTB records the errors a test reports, without failing it.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}
func (e *errorsTB) Helper()        {}
func (e *errorsTB) errors() string { return strings.Join(e.errs, "\n") }

// TestManifestsSecretAndNamespace writes the webhook certificate as a
// Secret, kept by the next run, and the rules of a manager restricted to a
// namespace as a Role there.
func TestManifestsSecretAndNamespace(t *testing.T) {
	dir := t.TempDir()
	d := backupDeployment()
	d.WebhookSecret, d.Options.Namespace = true, "team-a"
	t.Setenv("CTRL_MANIFESTS", "write")
	ctrltest.Manifests(t, dir, d)
	secret, err := os.ReadFile(filepath.Join(dir, "webhook/secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CTRL_MANIFESTS", "")
	ctrltest.Manifests(t, dir, d) // the same certificate: current
	for file, want := range map[string]string{
		"rbac/manager_role.yaml":         "kind: Role\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: ctrl\n    app.kubernetes.io/part-of: backup-operator\n  name: backup-operator-manager\n  namespace: team-a\n",
		"rbac/leader_election_role.yaml": "  name: backup-operator-leader-election\n  namespace: team-a\n",
		"webhook/manifests.yaml":         "caBundle: ",
		"webhook/secret.yaml":            "type: kubernetes.io/tls",
	} {
		got, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("%s (%v):\n%s\nwant it to contain:\n%s", file, err, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "certmanager")); err == nil {
		t.Error("got a certmanager directory, want none with WebhookSecret")
	}
	if len(secret) < 1000 {
		t.Errorf("got a Secret of %d bytes, want a certificate and key in it", len(secret))
	}
}

// TestManifestsErrors wires what cannot be deployed as it is.
func TestManifestsErrors(t *testing.T) {
	type unknownScope struct{ Backup }
	ctrl.MustRegister[*unknownScope](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "unknownscopes", Kind: "UnknownScope"})
	for _, tt := range []struct {
		name string
		d    func(*ctrltest.Deployment)
		want string
	}{
		{"webhooks without an address", func(d *ctrltest.Deployment) { d.Options.WebhookAddress = "" },
			`the wiring registers webhooks, but Options.WebhookAddress is not set: set it, such as ":9443"`},
		{"no port", func(d *ctrltest.Deployment) { d.Options.HealthAddress = "localhost" },
			`address "localhost" has no port to expose`},
		{"scope unknown", func(d *ctrltest.Deployment) {
			d.Setup = func(mgr *ctrl.Manager) error {
				_, err := ctrl.NewCache[*unknownScope](mgr, ctrl.CacheOptions{})
				return err
			}
		}, "wiring with no API server: ctrl: *ctrltest_test.unknownScope (unknownscopes.example.com/v1): its scope and status subresource are unknown"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := backupDeployment()
			tt.d(&d)
			tb := &stopTB{TB: t}
			func() {
				defer func() {
					if r := recover(); r != nil && r != tb {
						panic(r)
					}
				}()
				ctrltest.Manifests(tb, t.TempDir(), d)
			}()
			if !strings.Contains(tb.fatal, tt.want) {
				t.Errorf("got %q, want it to contain %q", tb.fatal, tt.want)
			}
		})
	}
}

// stopTB records the message of Fatalf, and stops the caller by panicking
// with itself.
type stopTB struct {
	testing.TB
	fatal string
}

func (s *stopTB) Fatalf(format string, args ...any) {
	s.fatal = fmt.Sprintf(format, args...)
	panic(s)
}
func (s *stopTB) Helper() {}

// Gizmo has two versions, converted by a webhook: the manifests give its
// CRD a conversion through the webhook Service, its CA from cert-manager.
type (
	Gizmo   struct{ Backup }
	GizmoV2 struct{ Backup }
)

const gizmoCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  names: {kind: Gizmo, listKind: GizmoList, plural: gizmos, singular: gizmo}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object}}}
`

func init() {
	ctrl.MustRegister[*Gizmo](ctrl.APIResource{Version: "v1", Kind: "Gizmo", CRD: []byte(gizmoCRD)})
	ctrl.MustRegister[*GizmoV2](ctrl.APIResource{Version: "v2", Kind: "Gizmo", CRD: []byte(gizmoCRD)})
}

func TestManifestsConversion(t *testing.T) {
	dir := t.TempDir()
	d := backupDeployment()
	d.Setup = func(mgr *ctrl.Manager) error {
		return ctrl.Convert(mgr,
			func(context.Context, *Gizmo, *GizmoV2) error { return nil },
			func(context.Context, *GizmoV2, *Gizmo) error { return nil })
	}
	t.Setenv("CTRL_MANIFESTS", "write")
	ctrltest.Manifests(t, dir, d)
	got, err := os.ReadFile(filepath.Join(dir, "crd/bases/example.com_gizmos.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"    cert-manager.io/inject-ca-from: backup-operator-system/backup-operator-serving-cert\n",
		"  conversion:\n    strategy: Webhook\n    webhook:\n      clientConfig:\n        service:\n          name: backup-operator-webhook\n          namespace: backup-operator-system\n          path: /convert\n",
		"      conversionReviewVersions:\n      - v1\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the CRD:\n%s\nwant it to contain:\n%s", got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "webhook/manifests.yaml")); err == nil {
		t.Error("got webhook configurations, want none for a conversion alone")
	}
}
