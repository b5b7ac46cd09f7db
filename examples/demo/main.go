// Command demo runs the Widget controller against a real kube-apiserver and
// etcd started on loopback, creates a few Widgets, and keeps running until
// Ctrl-C so that kubectl can poke at it. Run it with `make demo`.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/widget"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	fmt.Println("starting kube-apiserver and etcd on loopback...")
	env, err := ctrltest.New(ctrltest.Options{CRDs: [][]byte{widget.CRD}})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping kube-apiserver and etcd")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				a.Value = slog.StringValue(a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	}))
	// The webhooks' serving certificate, for loopback, signed by a CA of
	// the demo's own that the API server is told to trust.
	certDir, err := os.MkdirTemp("", "widget-demo-certs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(certDir)
	caBundle, err := ctrl.WriteWebhookCerts(certDir)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Logger: log, FieldManager: "widget-demo",
		WebhookAddress: "127.0.0.1:0", WebhookCertDir: certDir})
	if err != nil {
		return err
	}
	if err := widget.Setup(mgr); err != nil {
		return err
	}
	if err := widget.SetupWebhooks(mgr); err != nil {
		return err
	}
	widgets, err := ctrl.NewClient[*widget.Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}

	ctx := ctrl.SignalContext()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}

	fmt.Println("\n--- creating three Widgets")
	for i, msg := range []string{"hello", "bonjour", "hallo"} {
		w := &widget.Widget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("w%d", i+1)},
			Spec:       widget.Spec{Message: msg, Replicas: i + 1},
		}
		if _, err := widgets.Create(ctx, w); err != nil {
			return err
		}
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Println("\n--- changing w1's message: its ConfigMap follows")
	if _, err := widgets.Patch(ctx, ctrl.Key{Namespace: "default", Name: "w1"}, types.MergePatchType, []byte(`{"spec":{"message":"hello again"}}`)); err != nil {
		return err
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Println("\n--- deleting w3: the finalizer cleans up its ConfigMap")
	if err := widgets.Delete(ctx, ctrl.Key{Namespace: "default", Name: "w3"}, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}
	webhookURL := "https://" + mgr.Addresses().Webhook
	fmt.Printf("\n--- installing the Widget webhooks: the API server calls them at %s\n", webhookURL)
	if err := installWebhooks(ctx, env, mgr, webhookURL, caBundle); err != nil {
		return err
	}
	fmt.Println("\n--- creating w4 with 20 replicas: the validating webhook refuses it")
	w4 := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w4"}, Spec: widget.Spec{Message: "too many", Replicas: 20}}
	if _, err := widgets.Create(ctx, w4); err != nil {
		fmt.Printf("    refused: %v\n", err)
	} else {
		return errors.New("w4 was created: the validating webhook did not refuse it")
	}
	fmt.Println("\n--- creating w5 without a message: the defaulting webhook sets one")
	w5 := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w5"}, Spec: widget.Spec{Replicas: 1}}
	if w5, err = widgets.Create(ctx, w5); err != nil {
		return err
	}
	fmt.Printf("    stored with the message %q\n", w5.Spec.Message)
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}

	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	list, err := configMaps.Uncached().List(ctx, ctrl.ListParams{Namespace: "default"})
	if err != nil {
		return err
	}
	fmt.Println("\n--- ConfigMaps on the server:")
	for _, cm := range list {
		fmt.Printf("    %s: %v\n", cm.Name, cm.Data)
	}

	fmt.Printf("\nThe controller keeps running. Try:\n\n")
	fmt.Printf("    kubectl --kubeconfig %s get widgets\n", env.KubeconfigPath())
	fmt.Printf("    kubectl --kubeconfig %s patch widget w2 --type merge -p '{\"spec\":{\"message\":\"hi\"}}'\n", env.KubeconfigPath())
	fmt.Printf("    kubectl --kubeconfig %s patch widget w2 --type merge -p '{\"spec\":{\"replicas\":50}}'  # refused\n", env.KubeconfigPath())
	fmt.Printf("    kubectl --kubeconfig %s get events\n\n", env.KubeconfigPath())
	fmt.Println("Press Ctrl-C to stop.")
	err = <-done
	fmt.Println("manager stopped")
	return err
}

// installWebhooks creates the configurations that make the API server call
// the manager's webhooks at url, and waits until it does: it loads them
// asynchronously, so a dry-run create of a Widget the validator refuses
// tells when they are in effect.
func installWebhooks(ctx context.Context, env *ctrltest.Env, mgr *ctrl.Manager, url string, caBundle []byte) error {
	configs, err := mgr.WebhookConfigurations("widget-demo", ctrl.WebhookTarget{URL: url, CABundle: caBundle})
	if err != nil {
		return err
	}
	validating, err := ctrl.NewClient[*admissionregistrationv1.ValidatingWebhookConfiguration](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	if _, err := validating.Create(ctx, configs.Validating); err != nil {
		return err
	}
	mutating, err := ctrl.NewClient[*admissionregistrationv1.MutatingWebhookConfiguration](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	if _, err := mutating.Create(ctx, configs.Mutating); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.ctrl.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "default", "name": "probe"},
		"spec":     map[string]any{"message": "probe", "replicas": int64(20)},
	}}
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "example.ctrl.dev", Version: "v1", Resource: "widgets"}).Namespace("default")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := widgets.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server did not call the webhooks within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the API server
	}
}
