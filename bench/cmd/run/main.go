// Command run is the benchmark driver: it starts a real kube-apiserver and
// etcd, creates N ConfigMaps, and runs each controller implementation in
// turn as its own process through G rounds of updates to every object,
// repeating the sequence R times, and reports medians.
//
//	cd bench && go run ./cmd/run                  # N=20000 G=2 R=2, all implementations
//	go run ./cmd/run -n 2000 -g 2 -r 1            # a quick smoke run
//	go run ./cmd/run -impls ctrl -cpuprofile-dir /tmp/prof
//	go run ./cmd/run -write                       # also write its section of ../BENCHMARKS.md
//
// Every implementation writes a CPU profile of its update phase, which the
// driver sorts into buckets of cost (package internal/breakdown), and the
// driver reads the API server's and etcd's CPU time over the same phase.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
	"github.com/typedctrl/ctrl/bench/internal/breakdown"
	"github.com/typedctrl/ctrl/bench/internal/controlplane"
	"github.com/typedctrl/ctrl/bench/internal/harness"
)

// comparedImpls are the implementations the targets compare: ctrl and its
// two anchors, each in two configurations.
var comparedImpls = []string{"ctrl", "cr-default", "cr-strip", "raw", "raw-strip"}

// allImpls adds three diagnostics. Two show the cost of a deep copy before
// each reconcile, which ctrl no longer makes by default: ctrl-copy (ctrl
// with ControllerOptions.CopyObject) and raw-strip-copy (raw-strip with it). The third, raw-strip-nogzip, is
// raw-strip without response compression, as ctrl runs by default: what
// that default buys, and what remains. All run by default, in this order.
var allImpls = append(slices.Clone(comparedImpls), "ctrl-copy", "raw-strip-copy", "raw-strip-nogzip")

type config struct {
	n, g, r      int
	impls        []string
	writers      int
	patchRate    float64 // patches per second over all writers; 0: as fast as the server takes them
	dataBytes    int
	namespace    string
	repo         string // root of the ctrl module
	kubeconfig   string // of the running control plane
	work         string // binaries and logs
	profileDir   string
	profileImpls []string
	// apiserverProfile is how long the API server is profiled from the
	// start of each update phase; 0 for not at all.
	apiserverProfile time.Duration
	write            bool
}

func main() {
	var c config
	var impls, profileImpls string
	flag.IntVar(&c.n, "n", 20000, "number of ConfigMaps")
	flag.IntVar(&c.g, "g", 2, "update rounds per run")
	flag.IntVar(&c.r, "r", 2, "repetitions of the whole sequence of implementations")
	flag.StringVar(&impls, "impls", strings.Join(allImpls, ","), "implementations to run, comma-separated, from "+strings.Join(allImpls, ","))
	flag.IntVar(&c.writers, "writers", 16, "parallel writers creating and patching objects")
	flag.Float64Var(&c.patchRate, "patch-rate", 0, "patches per second over all writers in the update rounds, so that every implementation sees events at one rate (0: as fast as the API server takes them)")
	flag.IntVar(&c.dataBytes, "data-bytes", 1024, "bytes of data in each ConfigMap")
	flag.StringVar(&c.namespace, "namespace", "bench", "namespace of the objects")
	flag.StringVar(&c.repo, "repo", "..", "root of the github.com/typedctrl/ctrl module")
	flag.StringVar(&c.work, "workdir", filepath.Join(os.TempDir(), "ctrlbench"), "directory for binaries and logs")
	flag.StringVar(&c.profileDir, "cpuprofile-dir", "", "where the profiled implementations write pprof profiles: CPU over the update phase, heap after sync and after updates (default: profiles in -workdir)")
	flag.StringVar(&profileImpls, "profile-impls", strings.Join(allImpls, ","), "implementations that write profiles, comma-separated; the CPU breakdown covers these")
	flag.DurationVar(&c.apiserverProfile, "apiserver-profile", 30*time.Second, "profile the API server for this long from the start of each update phase, into the profile directory, to tell the part spent serving watches (0: do not; a shorter update phase waits for the profile)")
	flag.BoolVar(&c.write, "write", false, "write the throughput section of BENCHMARKS.md at the repository root")
	flag.Parse()
	c.impls = splitList(impls)
	c.profileImpls = splitList(profileImpls)
	for _, impl := range c.impls {
		if !slices.Contains(allImpls, impl) {
			fatal(fmt.Errorf("unknown implementation %q (want some of %s)", impl, strings.Join(allImpls, ",")))
		}
	}
	if c.n <= 0 || c.g <= 0 || c.r <= 0 || c.writers <= 0 || c.patchRate < 0 {
		fatal(errors.New("-n, -g, -r and -writers must be positive, -patch-rate not negative"))
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "run:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(c config) error {
	var err error
	if c.repo, err = filepath.Abs(c.repo); err != nil {
		return err
	}
	if c.profileDir == "" {
		c.profileDir = filepath.Join(c.work, "profiles")
	}
	if c.profileDir, err = filepath.Abs(c.profileDir); err != nil {
		return err
	}
	for _, dir := range []string{filepath.Join(c.work, "bin"), filepath.Join(c.work, "logs"), c.profileDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	res := &results{cfg: c, run: benchdoc.Begin(c.repo), sizes: map[string]int64{}}

	logf("building the control plane command and %d implementations", len(c.impls))
	cpBin := filepath.Join(c.work, "bin", "controlplane")
	if err := controlplane.Build(c.repo, cpBin); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, impl := range c.impls {
		bin := filepath.Join(c.work, "bin", impl)
		if err := goBuild(".", bin, "./cmd/"+impl, "-trimpath", "-ldflags=-s -w"); err != nil {
			return err
		}
		info, err := os.Stat(bin)
		if err != nil {
			return err
		}
		bins[impl], res.sizes[impl] = bin, info.Size()
	}

	logf("starting the control plane")
	var apiserverFlags []string
	if c.apiserverProfile > 0 {
		apiserverFlags = append(apiserverFlags, "--profiling=true")
	}
	cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", "controlplane.log"), apiserverFlags)
	if err != nil {
		return err
	}
	defer cp.Stop()
	c.kubeconfig = cp.Kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	// The driver is not measured: let it write as fast as the server takes it.
	cfg.QPS, cfg.Burst = 10000, 20000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	t0 := time.Now()
	if err := createObjects(ctx, cs, c); err != nil {
		return err
	}
	res.createSeconds = time.Since(t0).Seconds()
	logf("created %d ConfigMaps in %.1fs (%.0f/s)", c.n, res.createSeconds, float64(c.n)/res.createSeconds)

	round := 0 // objects are at round 0; every run gets fresh rounds
	for rep := 1; rep <= c.r; rep++ {
		for _, impl := range c.impls {
			var profileDir string
			if slices.Contains(c.profileImpls, impl) {
				profileDir = c.profileDir
			}
			logf("rep %d/%d: %s (rounds %d..%d)", rep, c.r, impl, round+1, round+c.g)
			rr, err := runImpl(ctx, cs, cp, c, impl, bins[impl], rep, round, profileDir)
			if err != nil {
				return fmt.Errorf("rep %d, %s: %w", rep, impl, err)
			}
			round += c.g
			res.runs = append(res.runs, rr)
			logf("  %s", rr.summary())
		}
	}
	res.run.Finish()

	report := res.markdown()
	fmt.Println(report.table)
	fmt.Println(report.cpu)
	fmt.Println(report.ratios)
	fmt.Println(report.runs)
	fmt.Printf("load average before: %s, after: %s\n", res.run.LoadBefore, res.run.LoadAfter)
	if c.write {
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "throughput", res.document(report)); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	if len(c.profileImpls) > 0 {
		logf("profiles in %s: go tool pprof -top %s; go run ./cmd/breakdown -top 5 %s", c.profileDir,
			filepath.Join(c.profileDir, "ctrl-r1-cpu-update.pprof"), filepath.Join(c.profileDir, "ctrl-r1-cpu-update.pprof"))
	}
	return nil
}

// goBuild builds pkg in dir into out.
func goBuild(dir, out, pkg string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// runResult is one run of one implementation.
type runResult struct {
	impl         string
	rep          int
	initSeconds  float64 // process spawn to main
	report       harness.Report
	roundSeconds []float64 // wall time to write each round and see it reconciled
	patchRate    float64   // patches per second the server took, over the run

	// CPU seconds of the API server and of etcd from just before "begin"
	// to the last round reconciled.
	apiserverSeconds, etcdSeconds float64
	// cpu is the controller's CPU profile of the update phase, by bucket;
	// profiled says whether it was taken.
	cpu      breakdown.Breakdown
	profiled bool
	// server is the API server's CPU profile over the first part of the
	// update phase, split; serverProfiled says whether it was taken.
	server         breakdown.Server
	serverProfiled bool
}

func (r runResult) summary() string {
	p := r.report
	return fmt.Sprintf("sync %.2fs, all reconciled %.2fs, heap %s/%s MiB, cpu %.3fs per 1k events, API server %.3fs per 1k, rss %s MiB, %d reconciles, %.0f patches/s",
		p.SyncSeconds, p.FirstSeconds, mib(p.HeapSyncedInuse), mib(p.HeapUpdatedInuse), p.CPUPer1kEvents,
		apiserverPer1k.get(r), mib(uint64(p.MaxRSSBytes)), p.Reconciles, r.patchRate)
}
