// Command shapes-ctrl is the shapes benchmark's pair of controllers written
// with ctrl and its defaults: one manager, two ctrl.NewController of
// ConfigMaps (slow and fast) on the manager's one cache of the type. See
// package shapes for its flags and protocol.
package main

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

func main() {
	h := shapes.Begin("ctrl")
	mgr, err := ctrl.NewManager(ctrl.Options{Config: h.Config(), Namespace: h.Flags.Namespace})
	if err != nil {
		h.Fatal(err)
	}
	opts := ctrl.ControllerOptions{Workers: h.Workers()}
	slow, err := ctrl.NewController(mgr, "slow", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		h.Slow(cm.Name, cm.Annotations)
		return ctrl.Result{}, nil
	}, opts)
	if err != nil {
		h.Fatal(err)
	}
	fast, err := ctrl.NewController(mgr, "fast", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		h.Fast(cm.Name, cm.Annotations)
		return ctrl.Result{}, nil
	}, opts)
	if err != nil {
		h.Fatal(err)
	}
	if slow.Cache() != fast.Cache() {
		h.Fatal(errors.New("slow and fast have caches of their own, want one"))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(h.Ctx) }()
	h.Run(stopped)
}
