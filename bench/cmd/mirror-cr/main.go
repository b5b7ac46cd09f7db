// Command mirror-cr is the fault benchmark's mirror controller written with
// controller-runtime: a manager whose cache holds the namespace's ConfigMaps
// labeled role=src, the builder's For, and a reconciler that reads the source
// from the cache and applies or deletes its mirror. See package mirror.
package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

func main() {
	p := mirror.Begin("mirror-cr")
	// The reflectors log through this logger too: verbosity 4 shows their
	// lines, as -v=4 does for client-go, and none of controller-runtime's
	// per-reconcile lines (verbosity 5).
	logf.SetLogger(p.Logger(4))
	mgr, err := manager.New(p.Config, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{p.Namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{mirror.SourceLabel: mirror.SourceValue})},
			},
		},
	})
	if err != nil {
		p.Fatal(err)
	}
	c := mgr.GetClient()
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var src corev1.ConfigMap
		if err := c.Get(ctx, req.NamespacedName, &src); apierrors.IsNotFound(err) {
			dst := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: mirror.Name(req.Name)}}
			return reconcile.Result{}, client.IgnoreNotFound(c.Delete(ctx, dst))
		} else if err != nil {
			return reconcile.Result{}, err
		}
		dst := corev1ac.ConfigMap(mirror.Name(src.Name), src.Namespace).WithData(src.Data)
		return reconcile.Result{}, c.Apply(ctx, dst, client.FieldOwner(mirror.FieldManager), client.ForceOwnership)
	})
	err = builder.ControllerManagedBy(mgr).
		Named("mirror").
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: mirror.Workers}).
		Complete(r)
	if err != nil {
		p.Fatal(err)
	}
	if err := mgr.Start(p.Ctx); err != nil {
		p.Fatal(err)
	}
}
