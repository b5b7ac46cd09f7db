package ctrl

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/go-logr/logr"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
	"github.com/typedctrl/ctrl/internal/serve"
	"github.com/typedctrl/ctrl/internal/webhook"
)

// Validator holds the functions of a validating admission webhook for T
// ([Validate]). nil admits; an API status error (apierrors.NewInvalid...)
// passes as it is; a *field.Error or field.ErrorList's ToAggregate()
// becomes 422 Invalid, one cause per field; any other error, 403 Forbidden.
// A nil function admits and is left out of the configuration. Calls may run
// concurrently; ctx ends at the request's timeout (Answered) and carries
// the logger with the request's uid and path.
type Validator[T Object] struct {
	// Create validates an object to be created.
	Create func(ctx context.Context, obj T) error
	// Update validates obj, which is to replace old.
	Update func(ctx context.Context, old, obj T) error
	// Delete validates the deletion of obj, the object as it is stored.
	Delete func(ctx context.Context, obj T) error
}

// Validate registers v as the validating webhook of T (built-in or
// [Register]ed), at the path [WebhookOptions] describes. It returns an
// error if T has one, v sets no function, the path or name is taken or
// invalid, more than one WebhookOptions is given, or, wrapping
// [ErrStarted], the manager started.
func Validate[T Object](m *Manager, v Validator[T], opts ...WebhookOptions) error {
	return addAdmission(m, "Validate", &webhook.Admission[T]{Create: v.Create, Update: v.Update, Delete: v.Delete}, opts)
}

// WebhookOptions choose an admission webhook's path and configuration name,
// such as an existing kubebuilder project's. The zero value: the defaults.
type WebhookOptions struct {
	// Path is the URL path of the webhook. Default:
	// /validate-<group with dashes>-<version>-<kind> for [Validate],
	// /mutate-... for [Mutate], as kubebuilder names them.
	Path string
	// Name is the webhook's name in its configuration: a DNS subdomain of at
	// least three segments, such as "vwidget.kb.io", unique in it. Default:
	// "<version>.<resource>.<group>", such as "v1.widgets.example.com".
	Name string
}

// Mutate registers f as the mutating webhook of T, called on creates and
// updates to change the object in place, as to set defaults; the API server
// gets a JSON patch, which leaves fields T does not know alone. Errors deny
// as for a [Validator]. It returns errors as [Validate] does.
func Mutate[T Object](m *Manager, f func(ctx context.Context, obj T) error, opts ...WebhookOptions) error {
	if f == nil {
		return fmt.Errorf("ctrl: Mutate %T: the function is nil", *new(T))
	}
	return addAdmission(m, "Mutate", &webhook.Admission[T]{Default: f}, opts)
}

func addAdmission[T Object](m *Manager, verb string, a *webhook.Admission[T], opts []WebhookOptions) error {
	info, err := resolve[T](m)
	if err != nil {
		return fmt.Errorf("ctrl: %s: %w", verb, err)
	}
	switch len(opts) {
	case 0:
	case 1:
		a.Path, a.Name = opts[0].Path, opts[0].Name
	default:
		return fmt.Errorf("ctrl: %s %s: %d WebhookOptions given, want one at most", verb, info.Type, len(opts))
	}
	a.Info = info
	return m.addWebhook(verb, func(s *webhook.Server) error { return webhook.AddAdmission(s, a) })
}

// Convert registers the conversion between A and B, two versions of one
// custom resource registered with [Register] with the same group, resource
// and kind, served at /convert (see [Manager.WebhookConfigurations]). toB
// and toA fill in a destination that carries a copy of the source's
// metadata, and may not change name, namespace or uid; ctx and concurrency
// are as for a [Validator]. With three versions or more, conversions chain
// along the shortest path of registered pairs. It returns an error if A and
// B are not two versions of one custom resource, a function is nil, the
// pair is registered, or, wrapping [ErrStarted], the manager started.
func Convert[A, B Object](m *Manager, toB func(ctx context.Context, src A, dst B) error, toA func(ctx context.Context, src B, dst A) error) error {
	a, err := binding.Lookup[A]()
	if err != nil {
		return fmt.Errorf("ctrl: Convert: %w", err)
	}
	b, err := binding.Lookup[B]()
	if err != nil {
		return fmt.Errorf("ctrl: Convert: %w", err)
	}
	return m.addWebhook("Convert", func(s *webhook.Server) error { return webhook.AddConversion(s, a, b, toB, toA) })
}

// AdmissionWarning adds msg to the warnings of the admission request of ctx
// (kubectl prints them), from a [Validator] or [Mutate] function;
// elsewhere it logs msg to ctx's logger at V(1).
func AdmissionWarning(ctx context.Context, msg string) {
	if !webhook.Warn(ctx, msg) {
		logr.FromContextOrDiscard(ctx).V(1).Info("AdmissionWarning outside an admission request", "warning", msg)
	}
}

type webhooks struct {
	once   sync.Once
	server *webhook.Server
	err    error
	handed atomic.Bool // WebhookHandler was called: the program serves them
}

func (m *Manager) webhookServer() (*webhook.Server, error) {
	m.webhooks.once.Do(func() {
		reg := m.opts.Registerer
		if m.registry != nil {
			reg = m.registry
		}
		met, err := metrics.NewWebhooks(reg)
		if err != nil {
			m.webhooks.err = fmt.Errorf("ctrl: registering the webhook metrics: %w", err)
			return
		}
		m.webhooks.server = webhook.New(m.log, met)
	})
	return m.webhooks.server, m.webhooks.err
}

func (m *Manager) addWebhook(verb string, add func(*webhook.Server) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return fmt.Errorf("ctrl: %s: %w", verb, ErrStarted)
	}
	s, err := m.webhookServer()
	if err != nil {
		return err
	}
	if err := add(s); err != nil {
		return fmt.Errorf("ctrl: %s: %w", verb, err)
	}
	return nil
}

// WebhookHandler returns the handler Start serves on
// Options.WebhookAddress, for programs that serve it themselves (which may
// then leave the address unset). It takes only POSTs of application/json,
// is safe for concurrent use, and serves webhooks registered later.
func (m *Manager) WebhookHandler() http.Handler {
	m.webhooks.handed.Store(true)
	s, err := m.webhookServer()
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
	}
	return s
}

// webhookEndpoint fails Start for webhooks nothing serves: every request would fail.
func (m *Manager) webhookEndpoint() (serve.Webhook, error) {
	if m.opts.WebhookAddress == "" {
		if s := m.webhooks.server; s != nil && !s.Empty() && !m.webhooks.handed.Load() {
			return serve.Webhook{}, fmt.Errorf("ctrl: Start: webhooks are registered (%s) but nothing serves them: "+
				"set Options.WebhookAddress, such as \":9443\", or serve Manager.WebhookHandler yourself", strings.Join(s.Paths(), ", "))
		}
		return serve.Webhook{}, nil
	}
	s, err := m.webhookServer()
	if err != nil {
		return serve.Webhook{}, err
	}
	return serve.Webhook{Address: m.opts.WebhookAddress, Handler: s, CertDir: m.opts.WebhookCertDir}, nil
}

// WebhookTarget says where the API server reaches the webhook server: set
// a URL (tests, servers outside the cluster) or a Service.
type WebhookTarget struct {
	// URL is the webhook server's base URL, such as
	// "https://127.0.0.1:9443"; each webhook's path is appended.
	URL string
	// Service fronts the webhook server, port 443 if unset; each webhook's
	// path is set on a copy.
	Service *admissionregistrationv1.ServiceReference
	// CABundle holds the PEM certificates that verify the server, such as
	// [WriteWebhookCerts] returns. Default: the API server's trust roots.
	CABundle []byte
}

// WebhookConfigurations make the API server call the manager's webhooks.
// Apply them with any client; they marshal to what kubectl takes.
type WebhookConfigurations struct {
	// Validating has a webhook per [Validate]d type, or is nil.
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	// Mutating has a webhook per [Mutate]d type, or is nil.
	Mutating *admissionregistrationv1.MutatingWebhookConfiguration
	// Conversions holds, by CRD name ("widgets.example.com"), the
	// spec.conversion of each resource with [Convert]ed versions.
	Conversions map[string]CRDConversion
}

// CRDConversion is apiextensions.k8s.io/v1 CustomResourceConversion, with
// its JSON names: marshal it into {"spec":{"conversion": ...}}.
type CRDConversion struct {
	// Strategy is "Webhook".
	Strategy string `json:"strategy"`
	// Webhook says how to call the conversion webhook.
	Webhook *CRDConversionWebhook `json:"webhook,omitempty"`
}

// CRDConversionWebhook is apiextensions.k8s.io/v1 WebhookConversion.
type CRDConversionWebhook struct {
	// ClientConfig is where the webhook is (apiextensions' fields and JSON).
	ClientConfig *admissionregistrationv1.WebhookClientConfig `json:"clientConfig,omitempty"`
	// ConversionReviewVersions are the versions the webhook understands: "v1".
	ConversionReviewVersions []string `json:"conversionReviewVersions"`
}

// WebhookConfigurations returns the configurations of the webhooks so far,
// named name, pointing at target: each fails closed, has no side effects,
// a 10 s timeout, matches equivalent versions (converted first) and only
// Options.Namespace if set, with its [WebhookOptions] name and path.
// Rename an object (configs.Mutating.Name) to keep existing names.
func (m *Manager) WebhookConfigurations(name string, target WebhookTarget) (WebhookConfigurations, error) {
	var out WebhookConfigurations
	if (target.URL == "") == (target.Service == nil) {
		return out, fmt.Errorf("ctrl: WebhookConfigurations %q: set one of the target's URL and Service", name)
	}
	s, err := m.webhookServer()
	if err != nil {
		return out, err
	}
	c := s.Configurations(name, m.opts.Namespace, webhook.Target(target))
	out.Validating, out.Mutating = c.Validating, c.Mutating
	for crd, cc := range c.Conversions {
		if out.Conversions == nil {
			out.Conversions = map[string]CRDConversion{}
		}
		out.Conversions[crd] = CRDConversion{Strategy: "Webhook", Webhook: &CRDConversionWebhook{
			ClientConfig: &cc, ConversionReviewVersions: []string{"v1"},
		}}
	}
	return out, nil
}

// WriteWebhookCerts writes, for development and tests, a new CA and a
// serving certificate valid a year for 127.0.0.1, ::1, localhost and
// dnsNames to dir (created if needed) as tls.crt, tls.key and ca.crt, each
// by rename, and returns the CA in PEM for [WebhookTarget].CABundle.
func WriteWebhookCerts(dir string, dnsNames ...string) (caBundle []byte, err error) {
	if caBundle, err = webhook.WriteCerts(dir, dnsNames...); err != nil {
		return nil, fmt.Errorf("ctrl: WriteWebhookCerts: %w", err)
	}
	return caBundle, nil
}
