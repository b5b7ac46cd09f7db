// Command scale is the driver of the scale benchmark: the memory of
// controllers caching 10k to 100k Pods (whole, metadata only, projected)
// with ctrl, controller-runtime and client-go, each its own process; their
// CPU per update event; what GOGC and GOMEMLIMIT do to peak RSS; and a
// sharded ctrl controller at 1, 2 and 3 replicas. It starts one real
// control plane, creates the objects with many parallel writers (the Pods
// in steps, so each count reuses the last), and writes charts and its
// section of ../BENCHMARKS.md.
//
//	cd bench && go run ./cmd/scale -write                  # everything (~30 min)
//	go run ./cmd/scale -counts 2000,4000 -update-n 1000 -shard-n 2000 -r 1   # a smoke run
//	go run ./cmd/scale -phases memory -impls ctrl-project,cr-default -profile-dir /tmp/prof
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// impl is one implementation: which binary, in which mode.
type impl struct {
	name, bin, mode, what string
}

// impls are every implementation of the Pod controller, in run order.
var impls = []impl{
	{"ctrl-full", "scale-ctrl", "full", "`ctrl.NewController` for `*corev1.Pod`: the cache holds whole Pods, managedFields dropped (ctrl's default)"},
	{"ctrl-full-copy", "scale-ctrl", "full-copy", "ctrl-full with `ControllerOptions.CopyObject`: reconcile gets its own copy of the cached Pod, as controller-runtime's client.Get makes; a diagnostic"},
	{"ctrl-meta", "scale-ctrl", "meta", "`ctrl.NewController` for `*metav1.PartialObjectMetadata` with `CacheOptions.Resource` naming pods: the server sends metadata only (client-go's metadata client, protobuf); managedFields dropped"},
	{"ctrl-project", "scale-ctrl", "project", "`ctrl.NewController` for `*podView`, a projection of Pods registered with `ctrl.Project` naming the fields it reads (spec.nodeName, status.phase, status.conditions): metadata (name, namespace, UID, resourceVersion, labels), phase, node, readiness and the round annotation; the server sends whole Pods, ctrl decodes only metadata and those fields"},
	{"cr-default", "scale-cr", "default", "controller-runtime manager, cache restricted to the namespace, `builder.For(&corev1.Pod{})`, reconcile `client.Get`s from the cache"},
	{"cr-strip", "scale-cr", "strip", "cr-default with `cache.Options{DefaultTransform: cache.TransformStripManagedFields()}`"},
	{"cr-meta", "scale-cr", "meta", "`builder.For(&corev1.Pod{}, builder.OnlyMetadata)`: a cache of `metav1.PartialObjectMetadata`, with `TransformStripManagedFields` as in cr-strip; reconcile `client.Get`s the metadata"},
	{"raw-strip", "scale-raw", "strip", "client-go shared informer factory for the namespace with a transform that drops managedFields, typed rate-limited work queue, lister `Get`; client-go's default gzip (as in the throughput benchmark)"},
	{"raw-strip-nogzip", "scale-raw", "strip-nogzip", "raw-strip with `rest.Config.DisableCompression`, as ctrl runs by default: a diagnostic"},
}

func implNamed(name string) (impl, bool) {
	for _, i := range impls {
		if i.name == name {
			return i, true
		}
	}
	return impl{}, false
}

var phaseNames = []string{"memory", "update", "knobs", "profile", "shard"}

type config struct {
	Counts         []int
	MemImpls       []string
	UpdateImpls    []string
	ProfImpls      []string
	KnobImpls      []string    // those of knobs, in order
	Knobs          [][2]string // implementation, setting
	UpdateN        int
	G, R           int
	ShardN         int
	Replicas       []int
	Writers        int
	Phases         []string
	Namespace      string
	ShardNS        string
	Repo           string
	Work           string
	ProfileDir     string
	Charts         string // directory of the SVG charts, relative to repo
	Write          bool
	Args           string // the command line, for the section
	APIServerFlags []string
}

func main() {
	var c config
	var apiFlags string
	var counts, memImpls, updateImpls, knobImpls, profImpls, replicas, phases string
	flag.StringVar(&counts, "counts", "10000,50000,100000", "Pod counts to measure memory at, ascending")
	flag.StringVar(&memImpls, "impls", "ctrl-full,ctrl-meta,ctrl-project,cr-default,cr-strip,cr-meta,raw-strip", "implementations measured at every count")
	flag.StringVar(&profImpls, "profile-impls", "ctrl-meta,ctrl-project,raw-strip", "implementations of the profile phase: one more update run each, with a CPU profile, whose time the section breaks down")
	flag.StringVar(&updateImpls, "update-impls", "ctrl-meta,ctrl-project,ctrl-full,raw-strip,raw-strip-nogzip", "implementations run through update rounds at the largest count")
	flag.StringVar(&knobImpls, "knobs", "ctrl-full:GOGC=50,ctrl-full:GOMEMLIMIT,ctrl-full:sync-gogc=25,ctrl-meta:GOGC=400",
		"runs with other Go runtime settings at the largest count, as implementation:setting; settings: GOGC=<n>, GOMEMLIMIT (1.2x the default run's heap), sync-gogc=<n> (GOGC n until the cache has synced and every object was reconciled once), container=<f> (in a memory cgroup limited to f times the default run's heap, which ctrl derives its memory budget from), or any other NAME=value, set in the environment (DISABLE_HTTP2=1: client-go's HTTP/1.1 only)")
	flag.IntVar(&c.UpdateN, "update-n", 10000, "Pods patched in each update round (the first of them)")
	flag.IntVar(&c.G, "g", 2, "update rounds per run")
	flag.IntVar(&c.R, "r", 2, "repetitions of the update runs, interleaved")
	flag.IntVar(&c.ShardN, "shard-n", 20000, "ConfigMaps of the sharded controller")
	flag.StringVar(&replicas, "replicas", "1,2,3", "replica counts of the sharded controller")
	flag.IntVar(&c.Writers, "writers", 32, "parallel writers creating and patching objects")
	flag.StringVar(&phases, "phases", strings.Join(phaseNames, ","), "phases to run, from "+strings.Join(phaseNames, ","))
	flag.StringVar(&c.Namespace, "namespace", "scale", "namespace of the Pods")
	flag.StringVar(&c.ShardNS, "shard-namespace", "shard", "namespace of the sharded ConfigMaps")
	flag.StringVar(&c.Repo, "repo", "..", "root of the github.com/typedctrl/ctrl module")
	flag.StringVar(&c.Work, "workdir", filepath.Join(os.TempDir(), "ctrlbench-scale"), "directory for binaries and logs")
	flag.StringVar(&c.ProfileDir, "profile-dir", "", "make every process write heap profiles (at measure), CPU profiles (update phase) and allocation profiles (at the update phase's begin and end: go tool pprof -sample_index=alloc_space -base <begin> <end>) here")
	flag.StringVar(&c.Charts, "charts", "bench/charts", "directory of the SVG charts, relative to -repo; written with -write")
	flag.StringVar(&apiFlags, "apiserver-flags", "--etcd-compaction-interval=30s --feature-gates=ShardedListAndWatch=true", "extra kube-apiserver flags, space-separated; the default compacts etcd often, so that the update rounds' old revisions of 100k Pods free their space before etcd's 2 GiB quota is reached, and lets the API server select sharded lists and watches by hash")
	flag.BoolVar(&c.Write, "write", false, "write the scale section of BENCHMARKS.md and the charts")
	flag.Var(extraCtrl{}, "ctrl-bin", "another build of scale-ctrl, as tag=path (repeatable): each ctrl-* implementation also runs as <name>@<tag> with it, to compare builds (a change before and after) in one run")
	render := flag.String("render", "", "run nothing: render the section (and with -write, write it and the charts) from the results.json of an earlier run")
	flag.Parse()
	c.Args = strings.Join(os.Args[1:], " ")
	c.APIServerFlags = strings.Fields(apiFlags)
	if *render != "" {
		if err := rerender(*render, c.Repo, c.Write); err != nil {
			fatal(err)
		}
		return
	}
	var err error
	if c.Counts, err = ints(counts); err != nil {
		fatal(err)
	}
	if c.Replicas, err = ints(replicas); err != nil {
		fatal(err)
	}
	c.ProfImpls = list(profImpls)
	c.MemImpls, c.UpdateImpls, c.Phases = list(memImpls), list(updateImpls), list(phases)
	var knobNames []string
	for _, k := range list(knobImpls) {
		name, setting, ok := strings.Cut(k, ":")
		if !ok || !(strings.Contains(setting, "=") || setting == "GOMEMLIMIT") {
			fatal(fmt.Errorf("-knobs %q: want implementation:setting", k))
		}
		c.Knobs = append(c.Knobs, [2]string{name, setting})
		if !slices.Contains(c.KnobImpls, name) {
			c.KnobImpls = append(c.KnobImpls, name)
		}
		knobNames = append(knobNames, name)
	}
	for _, name := range slices.Concat(c.MemImpls, c.UpdateImpls, knobNames, c.ProfImpls) {
		if _, ok := implNamed(name); !ok {
			fatal(fmt.Errorf("unknown implementation %q", name))
		}
	}
	for _, ph := range c.Phases {
		if !slices.Contains(phaseNames, ph) {
			fatal(fmt.Errorf("unknown phase %q", ph))
		}
	}
	if len(c.Counts) == 0 || !slices.IsSorted(c.Counts) || c.UpdateN > c.Counts[len(c.Counts)-1] || c.G <= 0 || c.R <= 0 {
		fatal(errors.New("-counts must ascend, -update-n be at most the largest count, -g and -r positive"))
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

// extraCtrl adds the implementations of another scale-ctrl binary.
type extraCtrl struct{}

func (extraCtrl) String() string { return "" }

func (extraCtrl) Set(v string) error {
	tag, path, ok := strings.Cut(v, "=")
	if !ok || tag == "" || path == "" {
		return fmt.Errorf("want tag=path, got %q", v)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for _, im := range slices.Clone(impls) {
		if im.bin == "scale-ctrl" {
			impls = append(impls, impl{name: im.name + "@" + tag, bin: "scale-ctrl@" + tag, mode: im.mode, what: im.what + " (the build " + tag + ")"})
		}
	}
	extraBins["scale-ctrl@"+tag] = abs
	return nil
}

// extraBins are the binaries of -ctrl-bin, by the bin name of their
// implementations.
var extraBins = map[string]string{}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q: want positive integers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
