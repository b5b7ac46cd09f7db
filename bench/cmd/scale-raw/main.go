// Command scale-raw is the hand-written client-go controller of Pods of the
// scale benchmark (cmd/scale): a shared informer factory for the namespace
// with a transform that drops managedFields, a typed rate-limited work
// queue and a lister, as package rawctl is for ConfigMaps. Mode strip keeps
// client-go's default of gzip-compressed responses, as the throughput
// benchmark's raw-strip does; mode strip-nogzip sets
// rest.Config.DisableCompression, as ctrl does by default. See package
// probe for the protocol.
package main

import (
	"flag"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

func main() {
	mode := flag.String("mode", "strip", "strip or strip-nogzip")
	p := probe.Begin(func() string { return "raw-" + *mode })
	cfg := p.Config()
	cfg.DisableCompression = *mode == "strip-nogzip"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		p.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(p.Flags.Namespace))
	pods := factory.Core().V1().Pods()
	informer, lister := pods.Informer(), pods.Lister()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())
	if err := informer.SetTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}); err != nil {
		p.Fatal(err)
	}
	enqueue := func(obj any) {
		if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			queue.Add(name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		p.Fatal(err)
	}
	p.Cached = func() int { return len(informer.GetStore().ListKeys()) }
	p.WatchSync(informer.HasSynced)
	stopped := make(chan error, 1)
	go func() {
		factory.Start(p.Ctx.Done())
		defer factory.Shutdown()
		cache.WaitForCacheSync(p.Ctx.Done(), informer.HasSynced)
		var wg sync.WaitGroup
		for range max(p.Flags.Workers, 1) {
			wg.Go(func() {
				for {
					key, quit := queue.Get()
					if quit {
						return
					}
					if pod, err := lister.Pods(key.Namespace).Get(key.Name); err == nil {
						p.Recorder.Observe(podgen.Index(pod.Name), podgen.Round(pod.Annotations))
					}
					queue.Forget(key)
					queue.Done(key)
				}
			})
		}
		<-p.Ctx.Done()
		queue.ShutDown()
		wg.Wait()
		stopped <- nil
	}()
	p.Run(stopped)
}
