// Package ctrlmain is the main function of the ctrl benchmark binaries.
package ctrlmain

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/harness"
)

// Main runs the ctrl implementation; copies sets
// ControllerOptions.CopyObject, so that reconcile gets a copy of the cached
// object, not the object itself.
func Main(name string, copies bool) {
	h := harness.Begin(name)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: h.Config(), Namespace: h.Flags.Namespace})
	if err != nil {
		h.Fatal(err)
	}
	c, err := ctrl.NewController(mgr, "bench", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		h.Recorder.Observe(cm.Name, cm.Annotations)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: h.Flags.Workers, CopyObject: copies})
	if err != nil {
		h.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(h.Ctx) }()
	h.Run(c.Cache().HasSynced, stopped)
}
