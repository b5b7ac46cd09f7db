// Command fleet-cr is the controller-runtime counterpart of fleet-ctrl in
// the fleet benchmark (cmd/fleet): what multicluster-runtime builds on, by
// hand. A manager on the hub, one cluster.Cluster per member (its own
// client, RESTMapper and cache restricted to the namespace) added to the
// manager, and one typed controller whose requests carry the member's
// name, with a source.TypedKind on each member's cache; reconcile reads
// the ConfigMap from that member's cache with client.Get. See package
// probe for the protocol.
package main

import (
	"context"
	"flag"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

// request is a ConfigMap of a member, as multicluster-runtime's
// mcreconcile.Request is.
type request struct {
	Cluster string
	types.NamespacedName
}

func main() {
	dir := flag.String("members-dir", "", "directory of the members' kubeconfig files")
	members := flag.Int("members", 1, "member clusters to engage")
	objects := flag.Int("objects", 5, "ConfigMaps in each member's namespace")
	p := probe.Begin(func() string { return "fleet-cr" })
	logf.SetLogger(logr.Discard())
	mgr, err := manager.New(p.Config(), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		p.Fatal(err)
	}
	clusters := map[string]cluster.Cluster{}
	ctl, err := controller.NewTyped[request]("fleet", mgr, controller.TypedOptions[request]{
		MaxConcurrentReconciles: p.Flags.Workers,
		Reconciler: reconcile.TypedFunc[request](func(ctx context.Context, req request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := clusters[req.Cluster].GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			p.Recorder.Observe(podgen.Index(req.Cluster)*(*objects)+podgen.Index(cm.Name), podgen.Round(cm.Annotations))
			return reconcile.Result{}, nil
		}),
	})
	if err != nil {
		p.Fatal(err)
	}
	for i := range *members {
		name := podgen.Name("m", i)
		name = name[:2] + name[len(name)-2:] // m-00
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(*dir, name+".yaml"))
		if err != nil {
			p.Fatal(err)
		}
		cfg.QPS, cfg.Burst = 20, 30
		cl, err := cluster.New(cfg, func(o *cluster.Options) {
			o.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{p.Flags.Namespace: {}}}
		})
		if err != nil {
			p.Fatal(err)
		}
		if err := mgr.Add(cl); err != nil {
			p.Fatal(err)
		}
		clusters[name] = cl
		enqueue := func(q workqueue.TypedRateLimitingInterface[request], cm *corev1.ConfigMap) {
			q.Add(request{Cluster: name, NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}})
		}
		h := handler.TypedFuncs[*corev1.ConfigMap, request]{
			CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[request]) {
				enqueue(q, e.Object)
			},
			UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[request]) {
				enqueue(q, e.ObjectNew)
			},
			DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[request]) {
				enqueue(q, e.Object)
			},
		}
		if err := ctl.Watch(source.TypedKind(cl.GetCache(), &corev1.ConfigMap{}, handler.TypedEventHandler[*corev1.ConfigMap, request](h))); err != nil {
			p.Fatal(err)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(p.Ctx) }()
	p.Run(stopped)
}
