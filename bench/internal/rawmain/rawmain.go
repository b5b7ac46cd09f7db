// Package rawmain is the main function of the raw client-go benchmark
// binaries.
package rawmain

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/harness"
	"github.com/typedctrl/ctrl/bench/internal/rawctl"
)

// Main runs the raw client-go implementation; strip drops managedFields in
// an informer transform, and copy deep-copies each object before reconcile.
func Main(name string, strip, copy bool) {
	h := harness.Begin(name)
	cs, err := kubernetes.NewForConfig(h.Config())
	if err != nil {
		h.Fatal(err)
	}
	opts := rawctl.Options{Namespace: h.Flags.Namespace, Workers: h.Flags.Workers, StripManagedFields: strip, Copy: copy}
	c, factory, err := rawctl.New(cs, opts, func(cm *corev1.ConfigMap) {
		h.Recorder.Observe(cm.Name, cm.Annotations)
	})
	if err != nil {
		h.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() {
		c.Run(h.Ctx, factory)
		stopped <- nil
	}()
	h.Run(c.HasSynced, stopped)
}
