// Command shapes-raw is the shapes benchmark's pair of controllers written
// directly against client-go, as package rawctl is: one shared informer
// factory for the namespace, its one ConfigMap informer feeding two
// controllers (slow and fast), each with a typed rate-limited work queue,
// its workers and the lister. See package shapes for its flags and
// protocol.
package main

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/rawctl"
	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

func main() {
	h := shapes.Begin("raw")
	cs, err := kubernetes.NewForConfig(h.Config())
	if err != nil {
		h.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(h.Flags.Namespace))
	opts := rawctl.Options{Namespace: h.Flags.Namespace, Workers: h.Workers()}
	var ctrls []*rawctl.Controller
	for _, record := range []func(string, map[string]string){h.Slow, h.Fast} {
		c, err := rawctl.On(factory, opts, func(cm *corev1.ConfigMap) { record(cm.Name, cm.Annotations) })
		if err != nil {
			h.Fatal(err)
		}
		ctrls = append(ctrls, c)
	}
	stopped := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		for _, c := range ctrls {
			wg.Go(func() { c.Run(h.Ctx, factory) })
		}
		wg.Wait()
		stopped <- nil
	}()
	h.Run(stopped)
}
