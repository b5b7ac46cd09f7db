// Command port turns each ConfigMap labeled app.example.com/managed=true
// into a Deployment of data.replicas pods running data.image, pinned to the
// digest its tag names, and pins it again when the registry's webhook says
// the tag moved.
//
// It is the ctrl half of a port from controller-runtime: the other half,
// bench/cmd/port-cr, is the same program written with controller-runtime.
// README.md compares their lengths.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/examples/port/registry"
)

const managedLabel = "app.example.com/managed"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; default: in-cluster config, then $KUBECONFIG or ~/.kube/config")
	hookAddr := flag.String("hook-address", ":8090", "address of the registry's webhook: POST /?app=namespace/name")
	flag.Parse()
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, *kubeconfig, *hookAddr); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func run(log logr.Logger, kubeconfig, hookAddr string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: config, Logger: log, FieldManager: "image-pinner"})
	if err != nil {
		return err
	}
	triggers := make(chan ctrl.Key)
	if err := setup(mgr, triggers, registry.Resolve); err != nil {
		return err
	}
	ctx := ctrl.SignalContext()
	go receiveHooks(ctx, log, hookAddr, triggers)
	return mgr.Start(ctx)
}

// setup wires the controller: it reconciles the labeled ConfigMaps, owns
// their Deployments (spec changes only: a Deployment's status changes with
// every pod), and reconciles the app of each key received on triggers.
func setup(mgr *ctrl.Manager, triggers <-chan ctrl.Key, resolve func(ctx context.Context, image string) (string, error)) error {
	deployments, err := ctrl.NewClient[*appsv1.Deployment](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	c, err := ctrl.NewController(mgr, "image-pinner", func(ctx context.Context, app *corev1.ConfigMap) (ctrl.Result, error) {
		replicas, err := strconv.ParseInt(app.Data["replicas"], 10, 32)
		if err != nil {
			return ctrl.Result{}, ctrl.Terminal(fmt.Errorf("data.replicas: %w", err))
		}
		image, err := resolve(ctx, app.Data["image"])
		if err != nil {
			return ctrl.Result{}, err
		}
		_, op, err := deployments.CreateOrPatch(ctx, ctrl.KeyOf(app), func(d *appsv1.Deployment) error {
			podLabels := map[string]string{"app": app.Name}
			d.Spec.Replicas = new(int32(replicas))
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: podLabels}
			d.Spec.Template.Labels = podLabels
			if len(d.Spec.Template.Spec.Containers) == 0 {
				d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app"}}
			}
			d.Spec.Template.Spec.Containers[0].Image = image
			return ctrl.SetControllerReference(app, d)
		})
		if err == nil && op != ctrl.Unchanged {
			logr.FromContextOrDiscard(ctx).Info("wrote the Deployment", "operation", op, "image", image)
		}
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{managedLabel: "true"})}})
	if err != nil {
		return err
	}
	if _, err := ctrl.Owns[*appsv1.Deployment](c, ctrl.GenerationChanged); err != nil {
		return err
	}
	go func() {
		for key := range triggers {
			c.Enqueue(key)
		}
	}()
	return nil
}

// receiveHooks serves the registry's webhook until ctx is done: a POST
// with app=namespace/name says that the tag of that app's image moved.
func receiveHooks(ctx context.Context, log logr.Logger, addr string, triggers chan<- ctrl.Key) {
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name, ok := strings.Cut(r.FormValue("app"), "/")
		if r.Method != http.MethodPost || !ok {
			http.Error(w, "want POST with app=namespace/name", http.StatusBadRequest)
			return
		}
		triggers <- ctrl.Key{Namespace: ns, Name: name}
	})}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Error(err, "registry webhook receiver stopped")
	}
}
