// Command mirror-raw is the fault benchmark's mirror controller written
// directly against client-go, the way sample-controller does it: a shared
// informer factory for the namespace with a label-selector tweak, a typed
// rate-limited work queue, a lister, and the typed clientset for writes. See
// package mirror.
package main

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

type controller struct {
	cs     kubernetes.Interface
	lister listersv1.ConfigMapLister
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

func main() {
	p := mirror.Begin("mirror-raw")
	cs, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		p.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(p.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = mirror.SourceSelector }))
	cms := factory.Core().V1().ConfigMaps()
	c := &controller{
		cs:     cs,
		lister: cms.Lister(),
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()),
	}
	_, err = cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		p.Fatal(err)
	}
	ctx := p.Ctx
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), cms.Informer().HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range mirror.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *controller) enqueue(obj any) {
	if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
		c.queue.Add(name)
	}
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing; requeuing", "key", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync applies the mirror of the source key, or deletes it if the source is
// gone.
func (c *controller) sync(ctx context.Context, key cache.ObjectName) error {
	dsts := c.cs.CoreV1().ConfigMaps(key.Namespace)
	src, err := c.lister.ConfigMaps(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		err := dsts.Delete(ctx, mirror.Name(key.Name), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	dst := corev1ac.ConfigMap(mirror.Name(src.Name), src.Namespace).WithData(src.Data)
	_, err = dsts.Apply(ctx, dst, metav1.ApplyOptions{FieldManager: mirror.FieldManager, Force: true})
	return err
}
