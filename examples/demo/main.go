// Command demo runs the Widget controller against a real kube-apiserver and
// etcd started on loopback, creates a few Widgets, and keeps running until
// Ctrl-C so that kubectl can poke at it. Run it with `make demo`.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Logger: log, FieldManager: "widget-demo"})
	if err != nil {
		return err
	}
	if err := widget.Setup(mgr); err != nil {
		return err
	}
	widgets, err := ctrl.NewClient[*widget.Widget](mgr)
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
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr)
	if err != nil {
		return err
	}
	list, err := configMaps.Live().List(ctx, ctrl.ListOptions{Namespace: "default"})
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
	fmt.Printf("    kubectl --kubeconfig %s get events\n\n", env.KubeconfigPath())
	fmt.Println("Press Ctrl-C to stop.")
	err = <-done
	fmt.Println("manager stopped")
	return err
}
