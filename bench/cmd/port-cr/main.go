// Command port-cr turns each ConfigMap labeled app.example.com/managed=true
// into a Deployment of data.replicas pods running data.image, pinned to the
// digest its tag names, and pins it again when the registry's webhook says
// the tag moved.
//
// It is the controller-runtime half of a port to ctrl: the other half,
// examples/port in ctrl's module, is the same program written with ctrl.
// examples/port/README.md compares their lengths.
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
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/typedctrl/ctrl/examples/port/registry"
)

const managedLabel = "app.example.com/managed"

func main() {
	// The kubeconfig flag is controller-runtime's: package config
	// registers it.
	hookAddr := flag.String("hook-address", ":8090", "address of the registry's webhook: POST /?app=namespace/name")
	flag.Parse()
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, *hookAddr); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func run(log logr.Logger, hookAddr string) error {
	logf.SetLogger(log)
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	// The default Scheme, client-go's, knows the built-in types.
	mgr, err := manager.New(cfg, manager.Options{
		Logger:  log,
		Metrics: metricsserver.Options{BindAddress: "0"}, // off, as ctrl's default
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{managedLabel: "true"})},
		}},
	})
	if err != nil {
		return err
	}
	triggers := make(chan event.GenericEvent)
	if err := setup(mgr, triggers, registry.Resolve); err != nil {
		return err
	}
	ctx := signals.SetupSignalHandler()
	go receiveHooks(ctx, log, hookAddr, triggers)
	return mgr.Start(ctx)
}

// setup wires the controller: it reconciles the labeled ConfigMaps, owns
// their Deployments (spec changes only: a Deployment's status changes with
// every pod), and reconciles the app of each event received on triggers.
func setup(mgr manager.Manager, triggers <-chan event.GenericEvent, resolve func(ctx context.Context, image string) (string, error)) error {
	c := mgr.GetClient()
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var app corev1.ConfigMap
		if err := c.Get(ctx, req.NamespacedName, &app); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		replicas, err := strconv.ParseInt(app.Data["replicas"], 10, 32)
		if err != nil {
			return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("data.replicas: %w", err))
		}
		image, err := resolve(ctx, app.Data["image"])
		if err != nil {
			return reconcile.Result{}, err
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Name}}
		op, err := controllerutil.CreateOrPatch(ctx, c, d, func() error {
			podLabels := map[string]string{"app": app.Name}
			d.Spec.Replicas = new(int32(replicas))
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: podLabels}
			d.Spec.Template.Labels = podLabels
			if len(d.Spec.Template.Spec.Containers) == 0 {
				d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app"}}
			}
			d.Spec.Template.Spec.Containers[0].Image = image
			return controllerutil.SetControllerReference(&app, d, mgr.GetScheme())
		})
		if err == nil && op != controllerutil.OperationResultNone {
			logf.FromContext(ctx).Info("wrote the Deployment", "operation", op, "image", image)
		}
		return reconcile.Result{}, err
	})
	return builder.ControllerManagedBy(mgr).
		Named("image-pinner").
		For(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(triggers, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// receiveHooks serves the registry's webhook until ctx is done: a POST
// with app=namespace/name says that the tag of that app's image moved.
func receiveHooks(ctx context.Context, log logr.Logger, addr string, triggers chan<- event.GenericEvent) {
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name, ok := strings.Cut(r.FormValue("app"), "/")
		if r.Method != http.MethodPost || !ok {
			http.Error(w, "want POST with app=namespace/name", http.StatusBadRequest)
			return
		}
		triggers <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
	})}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Error(err, "registry webhook receiver stopped")
	}
}
