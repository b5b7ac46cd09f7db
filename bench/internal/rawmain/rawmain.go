// Package rawmain is the main function of the raw client-go benchmark
// binaries.
package rawmain

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/harness"
	"github.com/typedctrl/ctrl/bench/internal/rawctl"
)

// Options are what the raw implementations change of the plain one.
type Options struct {
	Strip         bool // drop managedFields in an informer transform
	Copy          bool // deep-copy each object before reconcile
	NoCompression bool // rest.Config.DisableCompression: no gzip from the server
}

// Main runs the raw client-go implementation.
func Main(name string, o Options) {
	h := harness.Begin(name)
	cfg := h.Config()
	cfg.DisableCompression = o.NoCompression
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.Fatal(err)
	}
	opts := rawctl.Options{Namespace: h.Flags.Namespace, Workers: h.Flags.Workers, StripManagedFields: o.Strip, Copy: o.Copy}
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
