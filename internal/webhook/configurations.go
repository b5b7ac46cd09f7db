package webhook

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Target is where the API server reaches the webhook server: a URL or a
// Service, and the certificates that verify it. Its fields are those of
// ctrl's WebhookTarget, which converts to it.
type Target struct {
	// URL is the server's base URL; each webhook's path is appended.
	URL string
	// Service is the Service in front of the server; each webhook's path
	// is set on a copy.
	Service *admissionregistrationv1.ServiceReference
	// CABundle holds the PEM certificates that verify the server.
	CABundle []byte
}

// Configurations are the API objects that make the API server call the
// registered webhooks.
type Configurations struct {
	// Validating and Mutating are nil when no webhook of their kind is
	// registered.
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating   *admissionregistrationv1.MutatingWebhookConfiguration
	// Conversions is where the conversion webhook is, by the name of each
	// CustomResourceDefinition with a registered conversion; nil if none.
	Conversions map[string]admissionregistrationv1.WebhookClientConfig
}

// Configurations returns the configurations, named name, of the webhooks
// registered so far, calling target. Each fails closed, has no side
// effects and a timeout of 10 s, and matches equivalent versions of its
// resource, so that an object sent in another version is converted first.
// With a namespace, a namespaced resource's webhook matches only that
// namespace's objects.
func (s *Server) Configurations(name, namespace string, target Target) Configurations {
	var out Configurations
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		cc := admissionregistrationv1.WebhookClientConfig{CABundle: target.CABundle}
		if target.URL != "" {
			u := strings.TrimSuffix(target.URL, "/") + path
			cc.URL = &u
		} else {
			svc := *target.Service
			svc.Path = &path
			cc.Service = &svc
		}
		return cc
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(10)
	for _, h := range s.Hooks() {
		scope := admissionregistrationv1.ClusterScope
		if h.Namespaced {
			scope = admissionregistrationv1.NamespacedScope
		}
		var ops []admissionregistrationv1.OperationType
		for _, op := range h.Operations {
			ops = append(ops, admissionregistrationv1.OperationType(op))
		}
		rules := []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{h.Group}, APIVersions: []string{h.Version}, Resources: []string{h.Resource}, Scope: &scope,
		}}}
		var namespaces *metav1.LabelSelector
		if namespace != "" && h.Namespaced {
			namespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{namespace},
			}}}
		}
		if h.Mutating {
			if out.Mutating == nil {
				out.Mutating = &admissionregistrationv1.MutatingWebhookConfiguration{
					TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
					ObjectMeta: metav1.ObjectMeta{Name: name},
				}
			}
			out.Mutating.Webhooks = append(out.Mutating.Webhooks, admissionregistrationv1.MutatingWebhook{
				Name: h.Name, ClientConfig: clientConfig(h.Path), Rules: rules, FailurePolicy: &fail,
				MatchPolicy: &equivalent, NamespaceSelector: namespaces, SideEffects: &none, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: &never,
			})
			continue
		}
		if out.Validating == nil {
			out.Validating = &admissionregistrationv1.ValidatingWebhookConfiguration{
				TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
			}
		}
		out.Validating.Webhooks = append(out.Validating.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: h.Name, ClientConfig: clientConfig(h.Path), Rules: rules, FailurePolicy: &fail,
			MatchPolicy: &equivalent, NamespaceSelector: namespaces, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	for _, c := range s.Conversions() {
		if out.Conversions == nil {
			out.Conversions = map[string]admissionregistrationv1.WebhookClientConfig{}
		}
		out.Conversions[c.Resource+"."+c.Group] = clientConfig(ConvertPath)
	}
	return out
}
