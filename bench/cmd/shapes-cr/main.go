// Command shapes-cr is the shapes benchmark's pair of controllers written
// with controller-runtime and its default options: one manager, its cache
// restricted to the namespace, and two controllers (slow and fast) built
// with builder.For on the manager's one ConfigMap informer, each reconcile
// reading the object from the cache with client.Get. See package shapes for
// its flags and protocol.
package main

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

	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

func main() {
	h := shapes.Begin("cr")
	// ctrl discards logs by default; so does this, which also keeps
	// controller-runtime from warning that no logger was set.
	logf.SetLogger(logr.Discard())
	mgr, err := manager.New(h.Config(), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{h.Flags.Namespace: {}}},
	})
	if err != nil {
		h.Fatal(err)
	}
	c := mgr.GetClient()
	add := func(name string, record func(name string, annotations map[string]string)) {
		r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			record(cm.Name, cm.Annotations)
			return reconcile.Result{}, nil
		})
		err := builder.ControllerManagedBy(mgr).
			Named(name).
			For(&corev1.ConfigMap{}).
			WithOptions(controller.Options{MaxConcurrentReconciles: h.Workers()}).
			Complete(r)
		if err != nil {
			h.Fatal(err)
		}
	}
	add("slow", h.Slow)
	add("fast", h.Fast)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(h.Ctx) }()
	h.Run(stopped)
}
