// Package crctl is the benchmark's ConfigMap controller written with
// controller-runtime, as its documentation shows: a manager, the builder's
// For, and a reconciler that reads the object from the cache with
// client.Get.
package crctl

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/typedctrl/ctrl/bench/internal/harness"
)

// Main runs the controller-runtime implementation; strip sets the cache's
// DefaultTransform to TransformStripManagedFields.
func Main(name string, strip bool) {
	h := harness.Begin(name)
	// ctrl discards logs by default; do the same here, which also keeps
	// controller-runtime from warning that no logger was set.
	logf.SetLogger(logr.Discard())
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{h.Flags.Namespace: {}}}
	if strip {
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := manager.New(h.Config(), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
	})
	if err != nil {
		h.Fatal(err)
	}
	hasSynced, err := informerSynced(h.Ctx, mgr)
	if err != nil {
		h.Fatal(err)
	}
	c := mgr.GetClient()
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, req.NamespacedName, &cm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		h.Recorder.Observe(cm.Name, cm.Annotations)
		return reconcile.Result{}, nil
	})
	err = builder.ControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: h.Flags.Workers}).
		Complete(r)
	if err != nil {
		h.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(h.Ctx) }()
	h.Run(hasSynced, stopped)
}

// informerSynced returns the HasSynced of the manager's ConfigMap informer,
// the one the controller's source uses. Getting it before Start only
// registers it.
func informerSynced(ctx context.Context, mgr manager.Manager) (func() bool, error) {
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return nil, err
	}
	return inf.HasSynced, nil
}
