package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// warnings collects the warnings the API server sends a client.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// webhookManager returns a manager of ns that serves webhooks on loopback
// with a certificate of its own, and the CA bundle that verifies it.
func webhookManager(t *testing.T, ns string, opts ctrl.Options) (*ctrl.Manager, []byte, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := ctrl.WriteWebhookCerts(dir)
	must(t, err)
	if opts.Config == nil {
		opts.Config = env.Config()
	}
	opts.Namespace, opts.WebhookAddress, opts.WebhookCertDir = ns, "127.0.0.1:0", dir
	mgr, err := ctrl.NewManager(opts)
	must(t, err)
	return mgr, ca, dir
}

// installWebhooks creates the manager's webhook configurations pointing at
// its webhook server, and deletes them when the test ends.
func installWebhooks(t *testing.T, mgr *ctrl.Manager, name string, ca []byte) ctrl.WebhookConfigurations {
	t.Helper()
	ctx := context.Background()
	configs, err := mgr.WebhookConfigurations(name, ctrl.WebhookTarget{URL: "https://" + mgr.Addresses().Webhook, CABundle: ca})
	must(t, err)
	api := clientset.AdmissionregistrationV1()
	if configs.Validating != nil {
		_, err := api.ValidatingWebhookConfigurations().Create(ctx, configs.Validating, metav1.CreateOptions{})
		must(t, err)
		t.Cleanup(func() {
			_ = api.ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	if configs.Mutating != nil {
		_, err := api.MutatingWebhookConfigurations().Create(ctx, configs.Mutating, metav1.CreateOptions{})
		must(t, err)
		t.Cleanup(func() {
			_ = api.MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	return configs
}

// dryRunWidget asks the API server to create a Widget of size without
// storing it: every admission webhook runs. It returns the object that
// would be stored.
func dryRunWidget(ns string, size int) (*unstructured.Unstructured, error) {
	cfg := env.Config()
	cfg.WarningHandler = rest.NoWarnings{} // the defaulter's, checked elsewhere
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"generateName": "probe-", "namespace": ns},
		"spec":     map[string]any{"size": int64(size)},
	}}
	return dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace(ns).
		Create(context.Background(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

const tooBig = "spec.size: Invalid value: 11: must be at most 10"

// waitForValidation waits until the API server refuses a Widget of size 11
// with the validator's message, which is once it has loaded the webhook
// configurations.
func waitForValidation(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		_, err := dryRunWidget(ns, 11)
		if err == nil || !strings.Contains(err.Error(), tooBig) {
			return fmt.Errorf("dry-run create of a Widget of size 11: got %v, want the validator's refusal", err)
		}
		return nil
	})
}

// TestAdmissionWebhooks has the API server call a manager's validating and
// defaulting webhooks for Widgets over loopback TLS.
func TestAdmissionWebhooks(t *testing.T) {
	ns := newNamespace(t)
	cfg := env.Config()
	warned := &warnings{}
	cfg.WarningHandler = warned
	mgr, ca, certDir := webhookManager(t, ns, ctrl.Options{Config: cfg})
	var sawOld sync.Map // name -> size of the old object an update validator saw
	must(t, ctrl.Validate(mgr, ctrl.Validator[*Widget]{
		Create: func(_ context.Context, w *Widget) error {
			var errs field.ErrorList
			if w.Spec.Size < 0 || w.Spec.Size > 10 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "size"), w.Spec.Size, "must be at most 10"))
			}
			return errs.ToAggregate()
		},
		Update: func(_ context.Context, old, w *Widget) error {
			sawOld.Store(w.Name, old.Spec.Size)
			if w.Spec.Size < old.Spec.Size {
				return field.Invalid(field.NewPath("spec", "size"), w.Spec.Size, fmt.Sprintf("may not shrink from %d", old.Spec.Size))
			}
			return nil
		},
		Delete: func(_ context.Context, w *Widget) error {
			if w.Labels["protected"] == "true" {
				return fmt.Errorf("widget %s is protected", w.Name)
			}
			return nil
		},
	}))
	must(t, ctrl.Mutate(mgr, func(ctx context.Context, w *Widget) error {
		if w.Spec.Size == 0 {
			w.Spec.Size = 1
			metav1.SetMetaDataLabel(&w.ObjectMeta, "example.com/defaulted", "true")
			ctrl.AdmissionWarning(ctx, "size defaulted to 1")
		}
		return nil
	}))
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	name := "webhooks-" + ns
	installWebhooks(t, mgr, name, ca)
	waitForValidation(t, ns)
	widgets := newClient[*Widget](t, mgr).Uncached()

	t.Run("create refused with the field at fault", func(t *testing.T) {
		_, err := widgets.Create(ctx, newWidget(ns, "big", 11))
		var status *apierrors.StatusError
		if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
			t.Fatalf("got %v, want an Invalid status error", err)
		}
		if msg := status.ErrStatus.Message; !strings.Contains(msg, `admission webhook "v1.widgets.example.com" denied the request`) || !strings.Contains(msg, tooBig) {
			t.Errorf("got message %q, want the webhook's name and the validator's message", msg)
		}
		if d := status.ErrStatus.Details; d == nil || len(d.Causes) != 1 || d.Causes[0].Field != "spec.size" {
			t.Errorf("got details %+v, want one cause for spec.size", d)
		}
	})

	t.Run("create defaulted", func(t *testing.T) {
		_, err := widgets.Create(ctx, newWidget(ns, "small", 0))
		must(t, err)
		w, err := widgets.Get(ctx, ctrl.Key{Namespace: ns, Name: "small"})
		must(t, err)
		if w.Spec.Size != 1 || w.Labels["example.com/defaulted"] != "true" {
			t.Errorf("stored size %d, labels %v: want size 1 and the defaulted label", w.Spec.Size, w.Labels)
		}
		if !slices.Contains(warned.list(), "size defaulted to 1") {
			t.Errorf("got warnings %q, want the defaulter's", warned.list())
		}
	})

	t.Run("update validated against the old object", func(t *testing.T) {
		w, err := widgets.Create(ctx, newWidget(ns, "grow", 5))
		must(t, err)
		w.Spec.Size = 2
		_, err = widgets.Update(ctx, w)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size: Invalid value: 2: may not shrink from 5") {
			t.Errorf("shrinking: got %v, want the update validator's refusal", err)
		}
		if old, _ := sawOld.Load("grow"); old != 5 {
			t.Errorf("the update validator saw an old size of %v, want 5", old)
		}
		w.Spec.Size = 6
		w, err = widgets.Update(ctx, w)
		must(t, err)
		if w.Spec.Size != 6 {
			t.Errorf("got size %d, want 6", w.Spec.Size)
		}
	})

	t.Run("delete validated", func(t *testing.T) {
		w := newWidget(ns, "guarded", 3)
		w.Labels = map[string]string{"protected": "true"}
		_, err := widgets.Create(ctx, w)
		must(t, err)
		key := ctrl.Key{Namespace: ns, Name: "guarded"}
		err = widgets.Delete(ctx, key, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "widget guarded is protected") {
			t.Errorf("got %v, want the delete validator's refusal", err)
		}
		_, err = widgets.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"labels":{"protected":null}}}`))
		must(t, err)
		must(t, widgets.Delete(ctx, key, metav1.DeleteOptions{}))
	})

	t.Run("certificate replaced on disk", func(t *testing.T) {
		// cert-manager rotates the serving certificate, here with a new CA
		// too. The manager's next TLS handshake serves the new pair.
		newCA, err := ctrl.WriteWebhookCerts(certDir)
		must(t, err)
		addr := mgr.Addresses().Webhook
		eventually(t, 10*time.Second, func() error { return handshake(addr, newCA) })

		// Point the configurations at a CA that signed nothing, and wait
		// for the API server to fail: it now makes new connections with
		// the bundle it is given. Then give it the new CA alone: a call
		// that succeeds verified the new certificate.
		otherCA, err := ctrl.WriteWebhookCerts(t.TempDir())
		must(t, err)
		setCABundle(t, name, otherCA)
		eventually(t, 30*time.Second, func() error {
			_, err := dryRunWidget(ns, 11)
			if err == nil || !strings.Contains(err.Error(), "x509") {
				return fmt.Errorf("with a CA bundle that does not verify the server: got %v, want a TLS failure", err)
			}
			t.Logf("with a CA bundle that does not verify the server: %v", err)
			return nil
		})
		setCABundle(t, name, newCA)
		waitForValidation(t, ns)
		w, err := dryRunWidget(ns, 0)
		must(t, err)
		if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 1 {
			t.Errorf("defaulted size after the rotation: got %d, want 1", size)
		}
	})

	scraped := metricValue(t, mgr, "controller_runtime_webhook_requests_total", map[string]string{"webhook": "/validate-example-com-v1-widget", "code": "200"})
	if scraped < 5 {
		t.Errorf("got %v validating requests counted, want at least 5", scraped)
	}
}

// handshake connects to addr trusting only caPEM.
func handshake(addr string, caPEM []byte) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return err
	}
	return conn.Close()
}

// setCABundle sets the CA bundle of every webhook of the configurations
// named name.
func setCABundle(t *testing.T, name string, ca []byte) {
	t.Helper()
	ctx := context.Background()
	api := clientset.AdmissionregistrationV1()
	v, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = ca
	}
	_, err = api.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
	must(t, err)
	m, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = ca
	}
	_, err = api.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
	must(t, err)
}

// metricValue returns the value of a counter series of the manager.
func metricValue(t *testing.T, mgr *ctrl.Manager, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := mgr.Registry().Gather()
	must(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Gadget is served in two versions, v1 stored: v1alpha1 has a size and a
// color, v1 replicas and a message. Each keeps what only the other has in
// an annotation, so a round trip through either loses nothing.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec"`
}

// GadgetSpec is Gadget's spec in v1.
type GadgetSpec struct {
	Replicas int    `json:"replicas"`
	Message  string `json:"message,omitempty"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// GadgetV1alpha1 is Gadget in v1alpha1.
type GadgetV1alpha1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetV1alpha1Spec `json:"spec"`
}

// GadgetV1alpha1Spec is Gadget's spec in v1alpha1.
type GadgetV1alpha1Spec struct {
	Size  int    `json:"size"`
	Color string `json:"color,omitempty"`
}

func (g *GadgetV1alpha1) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	for _, err := range []error{
		ctrl.Register[*Gadget](ctrl.APIResource{Group: "conv.example.com", Version: "v1", Resource: "gadgets", Namespaced: true}),
		ctrl.Register[*GadgetV1alpha1](ctrl.APIResource{Group: "conv.example.com", Version: "v1alpha1", Resource: "gadgets", Kind: "Gadget", Namespaced: true}),
	} {
		if err != nil {
			panic(err)
		}
	}
}

const gadgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.conv.example.com
spec:
  group: conv.example.com
  scope: Namespaced
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              message: {type: string}
`

// The annotations that carry a field across the version that lacks it.
const (
	colorAnnotation   = "conv.example.com/color"
	messageAnnotation = "conv.example.com/message"
)

// stash moves value into annotation key, and unstash takes it back out.
func stash(m *metav1.ObjectMeta, key, value string) {
	if value != "" {
		metav1.SetMetaDataAnnotation(m, key, value)
	}
}

func unstash(m *metav1.ObjectMeta, key string) string {
	v := m.Annotations[key]
	delete(m.Annotations, key)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	return v
}

func gadgetToV1(_ context.Context, src *GadgetV1alpha1, dst *Gadget) error {
	if src.Spec.Size < 0 {
		return fmt.Errorf("size %d is negative", src.Spec.Size)
	}
	dst.Spec.Replicas = src.Spec.Size
	dst.Spec.Message = unstash(&dst.ObjectMeta, messageAnnotation)
	stash(&dst.ObjectMeta, colorAnnotation, src.Spec.Color)
	return nil
}

func gadgetToV1alpha1(_ context.Context, src *Gadget, dst *GadgetV1alpha1) error {
	dst.Spec.Size = src.Spec.Replicas
	dst.Spec.Color = unstash(&dst.ObjectMeta, colorAnnotation)
	stash(&dst.ObjectMeta, messageAnnotation, src.Spec.Message)
	return nil
}

var gadgetsGVR = schema.GroupVersionResource{Group: "conv.example.com", Version: "v1alpha1", Resource: "gadgets"}

// TestConversionWebhook has the API server store Gadgets as v1 and serve
// them as v1alpha1 too, converting through a manager's webhook.
func TestConversionWebhook(t *testing.T) {
	must(t, env.InstallCRDs([]byte(gadgetCRD)))
	ns := newNamespace(t)
	mgr, ca, _ := webhookManager(t, ns, ctrl.Options{})
	must(t, ctrl.Convert(mgr, gadgetToV1, gadgetToV1alpha1))
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	configs, err := mgr.WebhookConfigurations("gadgets", ctrl.WebhookTarget{URL: "https://" + mgr.Addresses().Webhook, CABundle: ca})
	must(t, err)
	conversion, ok := configs.Conversions["gadgets.conv.example.com"]
	if !ok {
		t.Fatalf("got conversions %v, want one for gadgets.conv.example.com", configs.Conversions)
	}
	setConversion(t, conversion)
	t.Cleanup(func() { setConversion(t, map[string]any{"strategy": "None", "webhook": nil}) })

	// Wait for the API server to convert through the webhook: until then
	// it relabels objects, and v1's schema prunes the color.
	dyn, err := dynamic.NewForConfig(env.Config())
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conv.example.com/v1alpha1", "kind": "Gadget",
			"metadata": map[string]any{"generateName": "probe-", "namespace": ns},
			"spec":     map[string]any{"size": int64(1), "color": "red"},
		}}
		out, err := dyn.Resource(gadgetsGVR).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if color, _, _ := unstructured.NestedString(out.Object, "spec", "color"); color != "red" {
			return fmt.Errorf("the probe came back with color %q, want red", color)
		}
		return nil
	})

	alpha := newClient[*GadgetV1alpha1](t, mgr).Uncached()
	v1 := newClient[*Gadget](t, mgr).Uncached()
	key := ctrl.Key{Namespace: ns, Name: "g1"}

	// Written as v1alpha1, stored as v1.
	_, err = alpha.Create(ctx, &GadgetV1alpha1{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g1", Labels: map[string]string{"app": "demo"}},
		Spec:       GadgetV1alpha1Spec{Size: 3, Color: "red"},
	})
	must(t, err)
	g, err := v1.Get(ctx, key)
	must(t, err)
	if g.Spec.Replicas != 3 || g.Annotations[colorAnnotation] != "red" || g.Labels["app"] != "demo" {
		t.Errorf("read as v1: got replicas %d, annotations %v, labels %v; want 3, the color kept, the label", g.Spec.Replicas, g.Annotations, g.Labels)
	}

	// A field only v1 has, written in v1, survives a v1alpha1 round trip.
	g.Spec.Message = "hi"
	_, err = v1.Update(ctx, g)
	must(t, err)
	a, err := alpha.Get(ctx, key)
	must(t, err)
	if a.Spec.Size != 3 || a.Spec.Color != "red" || a.Annotations[messageAnnotation] != "hi" || a.Annotations[colorAnnotation] != "" {
		t.Errorf("read as v1alpha1: got %+v, annotations %v; want size 3, color red, the message kept", a.Spec, a.Annotations)
	}
	a.Spec.Size = 4
	_, err = alpha.Update(ctx, a)
	must(t, err)
	g, err = v1.Get(ctx, key)
	must(t, err)
	if g.Spec.Replicas != 4 || g.Spec.Message != "hi" || g.Annotations[colorAnnotation] != "red" || g.Annotations[messageAnnotation] != "" {
		t.Errorf("after a v1alpha1 update: got %+v, annotations %v; want replicas 4, message hi, the color kept", g.Spec, g.Annotations)
	}
	if g.UID != a.UID || g.Name != "g1" || g.Namespace != ns || g.Labels["app"] != "demo" {
		t.Errorf("metadata changed through conversion: got %+v", g.ObjectMeta)
	}

	// Listed and watched as v1alpha1 by a cache.
	_, err = ctrl.NewCache[*GadgetV1alpha1](mgr, ctrl.CacheOptions{})
	must(t, err)
	cached := newClient[*GadgetV1alpha1](t, mgr)
	list, err := cached.List(ctx, ctrl.ListParams{})
	must(t, err)
	if len(list) != 1 || list[0].Spec.Size != 4 || list[0].Spec.Color != "red" {
		t.Errorf("listed as v1alpha1: got %d gadgets (%+v), want g1 with size 4 and color red", len(list), list)
	}

	// A conversion that fails fails the request, with its message.
	_, err = alpha.Create(ctx, &GadgetV1alpha1{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g2"}, Spec: GadgetV1alpha1Spec{Size: -1}})
	if err == nil || !strings.Contains(err.Error(), "size -1 is negative") {
		t.Errorf("creating a gadget whose conversion fails: got %v, want the conversion's error", err)
	}
	if n := metricValue(t, mgr, "controller_runtime_webhook_requests_total", map[string]string{"webhook": "/convert", "code": "200"}); n < 4 {
		t.Errorf("got %v conversion requests counted, want at least 4", n)
	}
}

// setConversion sets the Gadget CRD's spec.conversion with a merge patch.
func setConversion(t *testing.T, c any) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	must(t, err)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"conversion": c}})
	must(t, err)
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	_, err = dyn.Resource(crds).Patch(context.Background(), "gadgets.conv.example.com", types.MergePatchType, patch, metav1.PatchOptions{})
	must(t, err)
}
