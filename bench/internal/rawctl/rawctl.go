// Package rawctl is the benchmark's floor: a ConfigMap controller written
// directly against client-go the way sample-controller does it, with a shared
// informer factory, a typed rate-limited work queue and a lister.
package rawctl

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Options configure a controller.
type Options struct {
	Namespace string
	Workers   int
	// StripManagedFields sets an informer transform that drops managedFields.
	StripManagedFields bool
	// Copy deep-copies the object before handing it to the reconcile
	// function, as ctrl and controller-runtime do.
	Copy bool
}

// Controller is a running client-go controller.
type Controller struct {
	informer cache.SharedIndexInformer
	lister   listersv1.ConfigMapLister
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	opts     Options
	fn       func(*corev1.ConfigMap)
}

// New wires a controller that calls fn with each changed ConfigMap, read
// from the lister.
func New(cs kubernetes.Interface, opts Options, fn func(*corev1.ConfigMap)) (*Controller, informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(opts.Namespace))
	c, err := On(factory, opts, fn)
	if err != nil {
		return nil, nil, err
	}
	return c, factory, nil
}

// On wires a controller on the factory's ConfigMap informer, as New does:
// controllers wired on one factory share its informer and cache, each with
// a queue and workers of its own. opts.Namespace is the factory's.
func On(factory informers.SharedInformerFactory, opts Options, fn func(*corev1.ConfigMap)) (*Controller, error) {
	cms := factory.Core().V1().ConfigMaps()
	c := &Controller{
		informer: cms.Informer(),
		lister:   cms.Lister(),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()),
		opts:     opts,
		fn:       fn,
	}
	if opts.StripManagedFields {
		if err := c.informer.SetTransform(stripManagedFields); err != nil {
			return nil, err
		}
	}
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func (c *Controller) enqueue(obj any) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	if err == nil {
		c.queue.Add(name)
	}
}

// HasSynced reports whether the informer has synced.
func (c *Controller) HasSynced() bool { return c.informer.HasSynced() }

// Run starts the informers and workers and blocks until ctx is done and the
// workers have stopped. Controllers wired on one factory (On) each Run with
// it; the factory starts its informer once.
func (c *Controller) Run(ctx context.Context, factory informers.SharedInformerFactory) {
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced)
	var wg sync.WaitGroup
	for range max(c.opts.Workers, 1) {
		wg.Go(func() {
			for c.processNext() {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) processNext() bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	cm, err := c.lister.ConfigMaps(key.Namespace).Get(key.Name)
	if err == nil {
		if c.opts.Copy {
			cm = cm.DeepCopy()
		}
		c.fn(cm)
	}
	c.queue.Forget(key)
	return true
}
