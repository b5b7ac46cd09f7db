// Command scale-cr is the controller-runtime controller of Pods of the scale
// benchmark (cmd/scale), in one of three modes:
//
//	default  builder.For(&corev1.Pod{}), the cache as it comes
//	strip    default with cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
//	meta     builder.For(&corev1.Pod{}, builder.OnlyMetadata): a cache of metav1.PartialObjectMetadata,
//	         managedFields stripped as in strip
//
// Reconcile reads the object from the cache with client.Get and records its
// round annotation. See package probe for the protocol.
package main

import (
	"context"
	"flag"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

func main() {
	mode := flag.String("mode", "default", "default, strip or meta")
	p := probe.Begin(func() string { return "cr-" + *mode })
	logf.SetLogger(logr.Discard())
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{p.Flags.Namespace: {}}}
	if *mode != "default" {
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := manager.New(p.Config(), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
	})
	if err != nil {
		p.Fatal(err)
	}
	c := mgr.GetClient()
	var watched client.Object = &corev1.Pod{}
	var r reconcile.Func
	var opts []builder.ForOption
	if *mode == "meta" {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		watched = m
		opts = append(opts, builder.OnlyMetadata)
		r = func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			if err := c.Get(ctx, req.NamespacedName, m); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			p.Recorder.Observe(podgen.Index(m.Name), podgen.Round(m.Annotations))
			return reconcile.Result{}, nil
		}
	} else {
		r = func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var pod corev1.Pod
			if err := c.Get(ctx, req.NamespacedName, &pod); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			p.Recorder.Observe(podgen.Index(pod.Name), podgen.Round(pod.Annotations))
			return reconcile.Result{}, nil
		}
	}
	inf, err := mgr.GetCache().GetInformer(p.Ctx, watched)
	if err != nil {
		p.Fatal(err)
	}
	err = builder.ControllerManagedBy(mgr).
		For(&corev1.Pod{}, opts...).
		WithOptions(controller.Options{MaxConcurrentReconciles: p.Flags.Workers}).
		Complete(r)
	if err != nil {
		p.Fatal(err)
	}
	p.WatchSync(inf.HasSynced)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(p.Ctx) }()
	p.Run(stopped)
}
