package ctrl

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

// Validator holds the functions of a validating admission webhook for
// objects of T; register it with [Validate]. Each function admits the
// object by returning nil and denies it by returning an error:
//
//   - an API status error, such as one from apierrors.NewInvalid or
//     apierrors.NewForbidden, is passed on as it is: its code, reason and
//     causes;
//   - field errors, a *field.Error or the ToAggregate() of a
//     field.ErrorList, become 422 Invalid with one cause per field, which
//     kubectl lists under the object's name;
//   - any other error becomes 403 Forbidden with its message.
//
// A nil function admits its operation without a call, and the webhook's
// configuration leaves that operation out. Each call gets objects decoded
// from the request for it alone. Calls may run concurrently. ctx ends at the
// request's timeout; a function still running then is left to finish on its
// own and the request is denied, as it is when the function panics. ctx
// carries the manager's logger with the request's uid and the webhook's
// path (logr.FromContext). Call [AdmissionWarning] to add warnings to the answer.
type Validator[T Object] struct {
	// Create validates an object to be created.
	Create func(ctx context.Context, obj T) error
	// Update validates obj, which is to replace old.
	Update func(ctx context.Context, old, obj T) error
	// Delete validates the deletion of obj, the object as it is stored.
	Delete func(ctx context.Context, obj T) error
}

// Validate registers v as the validating admission webhook of T, served at
// /validate-<group with dashes>-<version>-<kind>, as controller-runtime
// names it ("/validate-example-com-v1-widget"), unless [WebhookOptions]
// choose another path or name. T is a built-in type or one registered with
// [Register]. It returns an error if T has a validating webhook already,
// if no function of v is set, if the path or name is taken or invalid, if
// more than one WebhookOptions is given, or, wrapping [ErrStarted], if the
// manager has started. The webhooks are served on Options.WebhookAddress;
// [Manager.WebhookConfigurations] tells the API server to call them.
func Validate[T Object](m *Manager, v Validator[T], opts ...WebhookOptions) error {
	return addAdmission(m, "Validate", &webhook.Admission[T]{Create: v.Create, Update: v.Update, Delete: v.Delete}, opts)
}

// WebhookOptions choose where an admission webhook ([Validate], [Default])
// is served and what its configuration calls it, so that a program whose
// webhook manifests exist, such as a kubebuilder project's, keeps their
// paths and names. The zero value means the defaults.
type WebhookOptions struct {
	// Path is the URL path the webhook is served at, such as
	// "/validate-example-com-v1-widget". Default:
	// /validate-<group with dashes>-<version>-<kind> for [Validate],
	// /mutate-... for [Default], as controller-runtime and kubebuilder
	// name them.
	Path string
	// Name is the webhook's name in its ValidatingWebhookConfiguration or
	// MutatingWebhookConfiguration: a DNS subdomain of three segments at
	// least, such as kubebuilder's "vwidget.kb.io", unique among the
	// webhooks of its configuration. Default:
	// "<version>.<resource>.<group>", such as "v1.widgets.example.com".
	Name string
}

// Default registers f as the defaulting (mutating) admission webhook of T,
// served at /mutate-<group with dashes>-<version>-<kind>. f is called on
// creates and updates with the object to store, and changes it in place;
// ctrl sends the API server a JSON patch of the changes, and leaves alone the
// fields T does not know. An error from f denies the request, as for a
// [Validator]. [WebhookOptions] may choose its path and name. It returns an
// error if T has a defaulting webhook already, if f is nil, if the path or
// name is taken or invalid, or, wrapping [ErrStarted], if the manager has
// started.
func Default[T Object](m *Manager, f func(ctx context.Context, obj T) error, opts ...WebhookOptions) error {
	if f == nil {
		return fmt.Errorf("ctrl: Default %T: the function is nil", *new(T))
	}
	return addAdmission(m, "Default", &webhook.Admission[T]{Default: f}, opts)
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
// custom resource, each registered with [Register] with the same group,
// resource and kind. toB converts an A into a B, toA a B into an A; each
// gets a new destination that already carries a copy of the source's
// metadata and fills in the rest. A field that exists in only one version
// is usually kept in an annotation of the other, so that a round trip loses
// nothing. ctx ends at the request's timeout and carries the manager's
// logger with the request's uid and the webhook's path
// (logr.FromContext); calls may run concurrently.
//
// The conversion webhook is served at /convert. For three versions or
// more, register each with a hub version: a conversion between two spokes
// goes through the hub, along the shortest chain of registered pairs. A
// conversion that changes the name, namespace or uid fails. The API server
// calls the webhook once the CustomResourceDefinition's spec.conversion
// says so: see [Manager.WebhookConfigurations].
//
// It returns an error if A and B are not two versions of one custom
// resource, if a function is nil, if the pair is registered already, or,
// wrapping [ErrStarted], if the manager has started.
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

// AdmissionWarning adds msg to the warnings of the admission request that
// ctx belongs to: kubectl prints them, and client-go logs them. Call it
// from a [Validator]'s function or a [Default] function. Anywhere else,
// such as in a reconcile, there is no request to answer: msg goes to the
// context's logger (logr.FromContext) instead, at V(1). Keep messages
// short: the API server truncates long ones.
func AdmissionWarning(ctx context.Context, msg string) {
	if !webhook.Warn(ctx, msg) {
		logr.FromContextOrDiscard(ctx).V(1).Info("AdmissionWarning outside an admission request", "warning", msg)
	}
}

// webhooks is the manager's webhook server, made on first use. The zero
// value is ready.
type webhooks struct {
	once   sync.Once
	server *webhook.Server
	err    error
	handed atomic.Bool // WebhookHandler was called: the program serves them
}

// webhookServer returns the manager's webhook server, registering its
// metrics on first use.
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

// addWebhook registers a webhook through add unless the manager started.
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

// WebhookHandler returns the handler of the manager's webhooks, the one
// Start serves on Options.WebhookAddress: for tests that serve it with
// net/http/httptest, or programs that serve it themselves. It routes by
// path, takes only POST requests of application/json, answers a review it
// cannot read with 400 and a message, and never panics. It is safe for
// concurrent use, and webhooks registered later are served too. A call
// tells Start that the program serves the webhooks: without it, a manager
// with webhooks and no Options.WebhookAddress fails to start.
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

// webhookEndpoint returns how Start serves the webhooks; no address when
// they are off. Webhooks that nothing would serve fail Start: the API
// server would fail every request they are configured for.
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
	return serve.Webhook{Address: m.opts.WebhookAddress, Handler: s, CertDir: webhookCertDir(m.opts)}, nil
}

func webhookCertDir(opts Options) string {
	if opts.WebhookCertDir != "" {
		return opts.WebhookCertDir
	}
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// WebhookTarget says where the API server reaches the manager's webhook
// server: a URL, for tests and servers outside the cluster, or a Service.
// Set one of them.
type WebhookTarget struct {
	// URL is the webhook server's base URL, such as
	// "https://127.0.0.1:9443"; each webhook's path is appended.
	URL string
	// Service is the Service in front of the webhook server; each
	// webhook's path is set on a copy. Its port defaults to 443.
	Service *admissionregistrationv1.ServiceReference
	// CABundle holds the PEM certificates that verify the webhook server's
	// certificate, such as the one [WriteWebhookCerts] returns. cert-manager's
	// CA injector can fill it in instead. Default: the API server's system
	// trust roots.
	CABundle []byte
}

// WebhookConfigurations are the API objects that make the API server call
// the manager's webhooks. Create or apply them with any client; they
// marshal to the JSON and YAML kubectl takes.
type WebhookConfigurations struct {
	// Validating has a webhook per type registered with [Validate], or is
	// nil if there is none.
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	// Mutating has a webhook per type registered with [Default], or is nil
	// if there is none.
	Mutating *admissionregistrationv1.MutatingWebhookConfiguration
	// Conversions holds, by CustomResourceDefinition name
	// ("widgets.example.com"), the spec.conversion to set on each custom
	// resource with conversions registered with [Convert].
	Conversions map[string]CRDConversion
}

// CRDConversion is the spec.conversion of a CustomResourceDefinition,
// apiextensions.k8s.io/v1 CustomResourceConversion, declared here with
// upstream's JSON names so that ctrl does not depend on the apiextensions
// module. Marshal it into a patch of the CRD, such as
// {"spec":{"conversion": ...}}.
type CRDConversion struct {
	// Strategy is "Webhook".
	Strategy string `json:"strategy"`
	// Webhook says how to call the conversion webhook.
	Webhook *CRDConversionWebhook `json:"webhook,omitempty"`
}

// CRDConversionWebhook is apiextensions.k8s.io/v1 WebhookConversion.
type CRDConversionWebhook struct {
	// ClientConfig is where the webhook is; apiextensions' type of the
	// same name has the same fields and JSON.
	ClientConfig *admissionregistrationv1.WebhookClientConfig `json:"clientConfig,omitempty"`
	// ConversionReviewVersions are the ConversionReview versions the
	// webhook understands: "v1".
	ConversionReviewVersions []string `json:"conversionReviewVersions"`
}

// WebhookConfigurations returns the configurations of the webhooks
// registered so far, named name (for the validating and mutating
// configuration objects) and pointing at target. Each webhook fails closed
// (failurePolicy Fail), has no side effects, a timeout of 10 seconds,
// matches equivalent versions of its resource (so an object sent in another
// version of a converted resource is converted first), and, if the manager
// has an Options.Namespace, matches only objects of that namespace. Each
// webhook has the name and path [WebhookOptions] gave it. The objects are
// plain API objects: to keep the names of existing manifests, such as
// kubebuilder's separate validating and mutating configurations, rename
// either (configs.Mutating.Name = "...") before applying it.
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

// WriteWebhookCerts makes a new certificate authority and a serving
// certificate it signs, valid for a year for 127.0.0.1, ::1, localhost and
// dnsNames, and writes them to dir (created if needed) as tls.crt, tls.key
// and ca.crt, where Options.WebhookCertDir finds them. It returns the CA
// certificate in PEM: the CABundle of a [WebhookTarget]. Each file is
// replaced with a rename, so a running manager never reads a partial one
// and serves the new pair from its next TLS handshake. For development and
// tests; in a cluster, cert-manager issues the certificate.
func WriteWebhookCerts(dir string, dnsNames ...string) (caBundle []byte, err error) {
	ca, cert, key, err := webhook.SelfSigned(dnsNames...)
	if err != nil {
		return nil, fmt.Errorf("ctrl: WriteWebhookCerts: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ctrl: WriteWebhookCerts: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{webhook.KeyFile, key, 0o600}, {webhook.CertFile, cert, 0o644}, {webhook.CAFile, ca, 0o644}} {
		if err := webhook.WriteFile(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return nil, fmt.Errorf("ctrl: WriteWebhookCerts: %w", err)
		}
	}
	return ca, nil
}
