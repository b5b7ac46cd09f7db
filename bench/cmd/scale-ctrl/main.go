// Command scale-ctrl is the ctrl controller of the scale and sharding
// benchmarks (cmd/scale), in one of four modes:
//
//	full     a controller of *corev1.Pod: the cache holds whole Pods, managedFields removed
//	full-copy  full with ControllerOptions.CopyObject: a diagnostic
//	meta     a controller of *metav1.PartialObjectMetadata for Pods (CacheOptions.Resource):
//	         the server sends metadata only
//	project  a controller of podView, a projection of Pods (ctrl.Project) that
//	         declares the fields it reads, so only those are decoded
//	cm       a controller of *corev1.ConfigMap: the reference for shard
//	shard    cm as one replica of a ring (Options.Sharding)
//
// Reconcile records the round annotation of the object it is given. See
// package probe for the protocol.
package main

import (
	"context"
	"flag"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

// podView is what a controller of Pods typically reads: identity, labels,
// owner, phase, node and readiness, and the round annotation the benchmark
// records.
type podView struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Phase corev1.PodPhase
	Node  string
	Ready bool
	Round int32
}

func (p *podView) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := ctrl.Project(func(pod *corev1.Pod) *podView {
		v := &podView{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
				ResourceVersion: pod.ResourceVersion, Labels: maps.Clone(pod.Labels)},
			Phase: pod.Status.Phase,
			Node:  pod.Spec.NodeName,
			Round: int32(podgen.Round(pod.Annotations)),
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				v.Ready = c.Status == corev1.ConditionTrue
			}
		}
		return v
	}, "spec.nodeName", "status.phase", "status.conditions")
	if err != nil {
		panic(err)
	}
}

var podResource = ctrl.APIResource{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true}

func main() {
	mode := flag.String("mode", "full", "full, full-copy, meta, project, cm or shard")
	ring := flag.String("ring", "bench", "shard mode: Sharding.Ring")
	identity := flag.String("identity", "", "shard mode: Sharding.Identity")
	byLabel := flag.Bool("by-label", false, "shard mode: Sharding.ByLabel, label mode where the server could select by hash")
	p := probe.Begin(func() string { return "ctrl-" + *mode })
	cfg := p.Config()
	opts := ctrl.Options{Config: cfg, Namespace: p.Flags.Namespace}
	if *mode == "cm" || *mode == "shard" {
		// In label mode every object is labeled once: with the throughput
		// benchmark's 20 requests/s it would take minutes. No client
		// limit, ctrl's default for a real server.
		cfg.QPS, cfg.Burst = 0, 0
	}
	if *mode == "shard" {
		opts.Sharding = ctrl.Sharding{Ring: *ring, LeaseOptions: ctrl.LeaseOptions{Identity: *identity}, ByLabel: *byLabel}
	}
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		p.Fatal(err)
	}
	copts := ctrl.ControllerOptions{Workers: p.Flags.Workers}
	var hasSynced func() bool
	switch *mode {
	case "full", "full-copy":
		copts.CopyObject = *mode == "full-copy"
		hasSynced, p.Cached, err = run(mgr, p, copts, func(pod *corev1.Pod) (string, int) { return pod.Name, podgen.Round(pod.Annotations) })
	case "meta":
		copts.Cache.Resource = podResource
		hasSynced, p.Cached, err = run(mgr, p, copts, func(m *metav1.PartialObjectMetadata) (string, int) {
			return m.Name, podgen.Round(m.Annotations)
		})
	case "project":
		hasSynced, p.Cached, err = run(mgr, p, copts, func(v *podView) (string, int) { return v.Name, int(v.Round) })
	case "cm", "shard":
		hasSynced, p.Cached, err = run(mgr, p, copts, func(cm *corev1.ConfigMap) (string, int) { return cm.Name, podgen.Round(cm.Annotations) })
	default:
		p.Fatal(flag.ErrHelp)
	}
	if err != nil {
		p.Fatal(err)
	}
	p.WatchSync(hasSynced)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(p.Ctx) }()
	p.Run(stopped)
}

// run wires a controller of T whose reconcile records the object's round.
func run[T ctrl.Object](mgr *ctrl.Manager, p *probe.Probe, opts ctrl.ControllerOptions, read func(T) (string, int)) (func() bool, func() int, error) {
	c, err := ctrl.NewController(mgr, "bench", func(ctx context.Context, obj T) (ctrl.Result, error) {
		name, round := read(obj)
		p.Recorder.Observe(podgen.Index(name), round)
		return ctrl.Result{}, nil
	}, opts)
	if err != nil {
		return nil, nil, err
	}
	return c.Cache().HasSynced, func() int { return len(c.Cache().List("", nil)) }, nil
}
