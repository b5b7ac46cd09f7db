// Command fleet-ctrl is the ctrl controller of the fleet benchmark
// (cmd/fleet): one manager on the hub engages the member clusters
// m-00..m-<members-1>, whose kubeconfigs are files <name>.yaml in
// -members-dir, with Manager.Engage, and one controller reconciles the
// ConfigMaps of one namespace of every member through a fleet cache
// (CacheOptions{Fleet: true}). Reconcile records the object it is given.
// See package probe for the protocol.
package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

func main() {
	dir := flag.String("members-dir", "", "directory of the members' kubeconfig files")
	members := flag.Int("members", 1, "member clusters to engage")
	objects := flag.Int("objects", 5, "ConfigMaps in each member's namespace")
	p := probe.Begin(func() string { return "fleet-ctrl" })
	mgr, err := ctrl.NewManager(ctrl.Options{Config: p.Config()})
	if err != nil {
		p.Fatal(err)
	}
	c, err := ctrl.NewController(mgr, "fleet", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		p.Recorder.Observe(podgen.Index(ctrl.RequestFrom(ctx).Key.Cluster)*(*objects)+podgen.Index(cm.Name), podgen.Round(cm.Annotations))
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Workers: p.Flags.Workers,
		Cache: ctrl.CacheOptions{Fleet: true, Namespaces: []string{p.Flags.Namespace}}})
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
		if err := mgr.Engage(name, ctrl.Member{Config: cfg}); err != nil {
			p.Fatal(fmt.Errorf("engage %s: %w", name, err))
		}
	}
	p.Cached = func() int { return len(c.Cache().List("", nil)) }
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(p.Ctx) }()
	p.Run(stopped)
}
