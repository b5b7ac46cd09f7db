// Command quickstart annotates every ConfigMap with a hash of its data.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
)

func main() {
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func run(log logr.Logger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // $KUBECONFIG or ~/.kube/config
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: config, Logger: log})
	if err != nil {
		return err
	}
	if err := setup(mgr); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mgr.Start(ctx)
}

// setup wires the controller to mgr: a program runs it against a cluster,
// a test against client-go's fake clientset.
func setup(mgr *ctrl.Manager) error {
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	_, err = ctrl.NewController(mgr, "configmap-hasher", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		sum := sha256.New()
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			fmt.Fprintf(sum, "%s=%s\n", k, cm.Data[k])
		}
		hash := fmt.Sprintf("%x", sum.Sum(nil))[:16]
		if cm.Annotations["example.com/hash"] == hash {
			return ctrl.Result{}, nil
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{"example.com/hash": hash},
		}})
		_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, patch)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: 2})
	return err
}
