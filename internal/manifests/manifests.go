// Package manifests writes the kustomize layout that deploys a manager, as
// kubebuilder's config/ does, from what its wiring needs: the CRDs, a
// ServiceAccount, roles and bindings, the Deployment, the metrics Service
// and, for webhooks, their Service, configurations and certificate. The
// caller (ctrltest.Manifests) wires the manager; this package knows no
// manager, only what it reports.
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Header starts every file written, so that a later run knows its own
// files from the user's.
const Header = "# Written by ctrltest.Manifests from the manager's wiring: change the wiring and\n# write it again (make manifests, or CTRL_MANIFESTS=write go test -run TestManifests).\n"

// Wiring is what the manifests are made of.
type Wiring struct {
	Name      string // of the Deployment, its ServiceAccount, roles and Services
	Namespace string // the program runs in
	Image     string
	Args      []string
	Replicas  int32
	Resources corev1.ResourceRequirements

	// Rules are the manager's (Manager.RBACRules), split here by where
	// they apply.
	Rules []rbacv1.PolicyRule
	// Namespaced tells a resource's scope; unknown resources are taken as
	// cluster-scoped, so that a ClusterRole holds their rules.
	Namespaced func(schema.GroupResource) bool
	// WatchNamespace is Options.Namespace: "" for all namespaces.
	WatchNamespace string
	// LeaseNamespace holds the Leases of leader election or sharding; ""
	// without either.
	LeaseNamespace string
	// MetricsPort serves /metrics (0: off), over HTTPS to authorized
	// tokens if MetricsSecure.
	MetricsPort   int32
	MetricsSecure bool
	HealthPort    int32 // serves /healthz and /readyz; 0: no probes
	// WebhookPort serves the webhooks (0: none), with the certificate
	// mounted at WebhookCertDir.
	WebhookPort    int32
	WebhookCertDir string
	// Validating and Mutating are the webhook configurations, pointing at
	// the webhook Service; Conversions the spec.conversion of CRDs by name.
	Validating  *admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating    *admissionregistrationv1.MutatingWebhookConfiguration
	Conversions map[string]any
	// CRDs are the CustomResourceDefinition manifests to install.
	CRDs [][]byte
	// CertManager has cert-manager issue the webhook certificate and
	// inject its CA; otherwise Secret holds it.
	CertManager bool
	Secret      *corev1.Secret
	// GracePeriod is the pod's termination grace period, in seconds.
	GracePeriod int64
}

// Names of what is written, after the Deployment's name.
func (w *Wiring) serviceAccount() string { return w.Name }
func (w *Wiring) webhookService() string { return w.Name + "-webhook" }
func (w *Wiring) webhookSecret() string  { return w.Name + "-webhook-cert" }
func (w *Wiring) certificate() string    { return w.Name + "-serving-cert" }

// WebhookService is the Service the webhook configurations point at.
func WebhookService(name, namespace string) *admissionregistrationv1.ServiceReference {
	return &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: name + "-webhook"}
}

// Build returns the files of the layout by path, each starting with
// Header. config/default/kustomization.yaml includes them all.
func Build(w Wiring) (map[string][]byte, error) {
	files := map[string][]byte{}
	add := func(file string, objs ...any) error {
		var b bytes.Buffer
		b.WriteString(Header)
		for _, o := range objs {
			doc, err := document(o)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			b.WriteString("---\n")
			b.Write(doc)
		}
		files[file] = b.Bytes()
		return nil
	}
	var dirs []string // of config/default's kustomization

	crds, err := w.crds()
	if err != nil {
		return nil, err
	}
	if len(crds) > 0 {
		var names []string
		for _, name := range slices.Sorted(maps.Keys(crds)) {
			files["crd/bases/"+name+".yaml"] = append([]byte(Header), crds[name]...)
			names = append(names, "bases/"+name+".yaml")
		}
		files["crd/kustomization.yaml"] = kustomization(names...)
		dirs = append(dirs, "../crd")
	}

	rbacFiles := []string{"service_account.yaml"}
	if err := add("rbac/service_account.yaml", w.meta(&corev1.ServiceAccount{}, "v1", "ServiceAccount", w.serviceAccount(), w.Namespace)); err != nil {
		return nil, err
	}
	for _, role := range w.roles() {
		file := strings.TrimPrefix(role.name, w.Name+"-") + "_role.yaml"
		file = strings.ReplaceAll(file, "-", "_")
		if err := add("rbac/"+file, role.objects(&w)...); err != nil {
			return nil, err
		}
		rbacFiles = append(rbacFiles, file)
	}
	files["rbac/kustomization.yaml"] = kustomization(rbacFiles...)
	dirs = append(dirs, "../rbac")

	managerObjs := []any{w.namespace(), w.deployment()}
	managerFiles := []string{"manager.yaml"}
	if err := add("manager/manager.yaml", managerObjs...); err != nil {
		return nil, err
	}
	if w.MetricsPort != 0 {
		if err := add("manager/metrics_service.yaml", w.service(w.Name+"-metrics", "https", 8443, "metrics")); err != nil {
			return nil, err
		}
		managerFiles = append(managerFiles, "metrics_service.yaml")
	}
	files["manager/kustomization.yaml"] = kustomization(managerFiles...)
	dirs = append(dirs, "../manager")

	if w.WebhookPort != 0 {
		var objs []any
		if w.Validating != nil {
			objs = append(objs, w.withCA(w.Validating.DeepCopy()))
		}
		if w.Mutating != nil {
			objs = append(objs, w.withCA(w.Mutating.DeepCopy()))
		}
		webhookFiles := []string{"service.yaml"}
		if len(objs) > 0 {
			if err := add("webhook/manifests.yaml", objs...); err != nil {
				return nil, err
			}
			webhookFiles = append(webhookFiles, "manifests.yaml")
		}
		if err := add("webhook/service.yaml", w.service(w.webhookService(), "https", 443, "webhook-server")); err != nil {
			return nil, err
		}
		if w.CertManager {
			if err := add("certmanager/certificate.yaml", w.issuer(), w.certificateObject()); err != nil {
				return nil, err
			}
			files["certmanager/kustomization.yaml"] = kustomization("certificate.yaml")
			dirs = append(dirs, "../certmanager")
		} else {
			if err := add("webhook/secret.yaml", w.Secret); err != nil {
				return nil, err
			}
			webhookFiles = append(webhookFiles, "secret.yaml")
		}
		files["webhook/kustomization.yaml"] = kustomization(webhookFiles...)
		dirs = append(dirs, "../webhook")
	}
	files["default/kustomization.yaml"] = kustomization(dirs...)
	return files, nil
}

// kustomization lists resources; the objects carry their namespaces, so
// that `kubectl apply -k config/default` needs no transformer.
func kustomization(resources ...string) []byte {
	var b strings.Builder
	b.WriteString(Header)
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, r := range resources {
		fmt.Fprintf(&b, "- %s\n", r)
	}
	return []byte(b.String())
}

// document marshals o as YAML, without the empty fields typed objects
// carry (creationTimestamp: null, status: {}).
func document(o any) ([]byte, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	prune(m)
	return yaml.Marshal(m)
}

// prune removes nulls and empty maps, which say nothing.
func prune(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			prune(v)
			if len(v) == 0 {
				delete(m, k)
			}
		case []any:
			for _, e := range v {
				if e, ok := e.(map[string]any); ok {
					prune(e)
				}
			}
		}
	}
}

func (w *Wiring) labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": w.Name}
}

// meta sets the type and object metadata of obj, a pointer to a typed
// object, and returns it.
func (w *Wiring) meta(obj interface {
	GetObjectKind() schema.ObjectKind
	SetName(string)
	SetNamespace(string)
	SetLabels(map[string]string)
}, apiVersion, kind, name, namespace string) any {
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
	obj.SetName(name)
	obj.SetNamespace(namespace)
	obj.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "ctrl", "app.kubernetes.io/part-of": w.Name})
	return obj
}

func (w *Wiring) namespace() any {
	ns := w.meta(&corev1.Namespace{}, "v1", "Namespace", w.Namespace, "").(*corev1.Namespace)
	// Restricted: the Deployment below meets it, and nothing else may run there unless it does.
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	return ns
}

func (w *Wiring) service(name, portName string, port int32, target string) any {
	s := w.meta(&corev1.Service{}, "v1", "Service", name, w.Namespace).(*corev1.Service)
	s.Spec = corev1.ServiceSpec{
		Selector: w.labels(),
		Ports:    []corev1.ServicePort{{Name: portName, Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString(target)}},
	}
	return s
}

func (w *Wiring) deployment() any {
	d := w.meta(&appsv1.Deployment{}, "apps/v1", "Deployment", w.Name, w.Namespace).(*appsv1.Deployment)
	no, yes := false, true
	c := corev1.Container{
		Name:      "manager",
		Image:     w.Image,
		Args:      w.Args,
		Resources: w.Resources,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			RunAsNonRoot:             &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	port := func(name string, n int32) {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: n, Protocol: corev1.ProtocolTCP})
	}
	if w.MetricsPort != 0 {
		port("metrics", w.MetricsPort)
	}
	if w.WebhookPort != 0 {
		port("webhook-server", w.WebhookPort)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "webhook-cert", MountPath: w.WebhookCertDir, ReadOnly: true})
	}
	if w.HealthPort != 0 {
		port("health", w.HealthPort)
		probe := func(path string, delay, period int32) *corev1.Probe {
			return &corev1.Probe{
				ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("health")}},
				InitialDelaySeconds: delay,
				PeriodSeconds:       period,
			}
		}
		c.LivenessProbe, c.ReadinessProbe = probe("/healthz", 15, 20), probe("/readyz", 5, 10)
	}
	replicas := w.Replicas
	spec := corev1.PodSpec{
		ServiceAccountName:            w.serviceAccount(),
		TerminationGracePeriodSeconds: &w.GracePeriod,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   &yes,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{c},
	}
	if w.WebhookPort != 0 {
		spec.Volumes = []corev1.Volume{{Name: "webhook-cert", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: w.webhookSecret()}}}}
	}
	d.Spec = appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: w.labels()},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: w.labels(),
				Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "manager"}},
			Spec: spec,
		},
	}
	return d
}

// DefaultResources are kubebuilder's: enough for a controller of a few
// thousand objects; the memory limit also paces the Go collector
// (Options.MemoryLimit).
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
}

// role is a Role or ClusterRole and its binding to the ServiceAccount.
type role struct {
	name      string
	namespace string // "": a ClusterRole
	rules     []rbacv1.PolicyRule
	unbound   bool // for others to bind: the metrics reader
}

func (r role) objects(w *Wiring) []any {
	kind := "ClusterRole"
	if r.namespace != "" {
		kind = "Role"
	}
	var obj any
	if r.namespace != "" {
		ro := w.meta(&rbacv1.Role{}, "rbac.authorization.k8s.io/v1", kind, r.name, r.namespace).(*rbacv1.Role)
		ro.Rules = r.rules
		obj = ro
	} else {
		ro := w.meta(&rbacv1.ClusterRole{}, "rbac.authorization.k8s.io/v1", kind, r.name, "").(*rbacv1.ClusterRole)
		ro.Rules = r.rules
		obj = ro
	}
	if r.unbound {
		return []any{obj}
	}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: w.serviceAccount(), Namespace: w.Namespace}}
	ref := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: r.name}
	if r.namespace != "" {
		b := w.meta(&rbacv1.RoleBinding{}, "rbac.authorization.k8s.io/v1", "RoleBinding", r.name, r.namespace).(*rbacv1.RoleBinding)
		b.Subjects, b.RoleRef = subjects, ref
		return []any{obj, b}
	}
	b := w.meta(&rbacv1.ClusterRoleBinding{}, "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", r.name, "").(*rbacv1.ClusterRoleBinding)
	b.Subjects, b.RoleRef = subjects, ref
	return []any{obj, b}
}

var (
	leases  = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	reviews = []schema.GroupResource{{Group: "authentication.k8s.io", Resource: "tokenreviews"}, {Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}}
)

// roles splits the rules as kubebuilder's layout does: the Leases in a
// Role of their namespace, the reviews of secure metrics in a ClusterRole
// of their own, the rest in a Role of the watched namespace (cluster-scoped
// resources aside) or a ClusterRole; and a ClusterRole for scrapers to get
// /metrics, bound by whoever scrapes.
func (w *Wiring) roles() []role {
	manager := role{name: w.Name + "-manager"}
	cluster := role{name: w.Name + "-manager"} // cluster-scoped resources, when the rest is namespaced
	lease := role{name: w.Name + "-leader-election", namespace: w.LeaseNamespace}
	metrics := role{name: w.Name + "-metrics-auth"}
	for _, r := range w.Rules {
		gr := schema.GroupResource{}
		if len(r.APIGroups) == 1 && len(r.Resources) == 1 && len(r.NonResourceURLs) == 0 {
			gr = schema.GroupResource{Group: r.APIGroups[0], Resource: r.Resources[0]}
		}
		base, _, _ := strings.Cut(gr.Resource, "/")
		switch {
		case gr == leases && w.LeaseNamespace != "":
			lease.rules = append(lease.rules, r)
		case slices.Contains(reviews, gr):
			metrics.rules = append(metrics.rules, r)
		case w.WatchNamespace != "" && gr.Resource != "" && w.Namespaced(schema.GroupResource{Group: gr.Group, Resource: base}):
			manager.rules = append(manager.rules, r)
		default:
			cluster.rules = append(cluster.rules, r)
		}
	}
	var out []role
	if w.WatchNamespace != "" {
		manager.namespace = w.WatchNamespace
		if len(manager.rules) > 0 {
			out = append(out, manager)
		}
		cluster.name = w.Name + "-manager-cluster"
	}
	if len(cluster.rules) > 0 {
		out = append(out, cluster)
	}
	if len(lease.rules) > 0 {
		out = append(out, lease)
	}
	if len(metrics.rules) > 0 {
		out = append(out, metrics)
		out = append(out, role{name: w.Name + "-metrics-reader", unbound: true,
			rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}})
	}
	return out
}

// crds returns the CRD manifests by file name (kubebuilder's
// <group>_<plural>), as controller-gen wrote them, but for the conversion
// webhook of those that have one.
func (w *Wiring) crds() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, data := range w.CRDs {
		for _, doc := range splitDocuments(data) {
			var crd map[string]any
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				return nil, fmt.Errorf("reading a CRD: %w", err)
			}
			meta, _ := crd["metadata"].(map[string]any)
			spec, _ := crd["spec"].(map[string]any)
			names, _ := spec["names"].(map[string]any)
			name, _ := meta["name"].(string)
			group, _ := spec["group"].(string)
			plural, _ := names["plural"].(string)
			if name == "" || group == "" || plural == "" {
				return nil, fmt.Errorf("a CRD has no metadata.name, spec.group or spec.names.plural")
			}
			if conv, ok := w.Conversions[name]; ok {
				spec["conversion"] = conv
				if w.CertManager {
					w.injectCA(meta)
				}
				var err error
				if doc, err = yaml.Marshal(crd); err != nil {
					return nil, err
				}
			}
			out[group+"_"+plural] = append([]byte("---\n"), doc...)
		}
	}
	return out, nil
}

// splitDocuments returns the non-empty YAML documents of data.
func splitDocuments(data []byte) [][]byte {
	var out [][]byte
	for doc := range strings.SplitSeq("\n"+string(data), "\n---") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(strings.TrimLeft(doc, "\n")+"\n"))
		}
	}
	return out
}

// injectCA has cert-manager's cainjector fill in the caBundle of an
// object's webhooks from the certificate.
func (w *Wiring) injectCA(meta map[string]any) {
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann["cert-manager.io/inject-ca-from"] = w.Namespace + "/" + w.certificate()
}

// withCA labels a webhook configuration, and has cert-manager inject its
// CA (the Secret's CA is in it already).
func (w *Wiring) withCA(obj interface {
	metav1.Object
	GetObjectKind() schema.ObjectKind
}) any {
	obj.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "ctrl", "app.kubernetes.io/part-of": w.Name})
	if w.CertManager {
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["cert-manager.io/inject-ca-from"] = w.Namespace + "/" + w.certificate()
		obj.SetAnnotations(ann)
	}
	return obj
}

// DNSNames are the names the webhook Service answers to.
func DNSNames(name, namespace string) []string {
	svc := WebhookService(name, namespace)
	return []string{svc.Name + "." + namespace + ".svc", svc.Name + "." + namespace + ".svc.cluster.local"}
}

func (w *Wiring) issuer() any {
	return map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Issuer",
		"metadata":   map[string]any{"name": w.Name + "-selfsigned-issuer", "namespace": w.Namespace},
		"spec":       map[string]any{"selfSigned": map[string]any{}},
	}
}

func (w *Wiring) certificateObject() any {
	return map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Certificate",
		"metadata":   map[string]any{"name": w.certificate(), "namespace": w.Namespace},
		"spec": map[string]any{
			"dnsNames":   DNSNames(w.Name, w.Namespace),
			"issuerRef":  map[string]any{"kind": "Issuer", "name": w.Name + "-selfsigned-issuer"},
			"secretName": w.webhookSecret(),
		},
	}
}

// SecretFor returns the webhook Secret holding caPEM, certPEM and keyPEM.
func SecretFor(name, namespace string, caPEM, certPEM, keyPEM []byte) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name + "-webhook-cert", Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"ca.crt": caPEM, corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
	return s
}

// Port returns the port of a listen address such as ":8443", or 0.
func Port(address string) (int32, error) {
	if address == "" {
		return 0, nil
	}
	_, p, ok := strings.Cut(address[strings.LastIndex(address, "]")+1:], ":")
	var n int32
	if _, err := fmt.Sscan(p, &n); !ok || err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("address %q has no port to expose: give one, such as \":8443\"", address)
	}
	return n, nil
}
