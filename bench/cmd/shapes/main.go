// Command shapes is the driver of the shapes benchmark: how long a
// controller takes to see a write while another controller on the same
// cache spends a fixed time in each reconcile. It starts a real
// kube-apiserver and etcd, creates N ConfigMaps in one namespace, and runs
// ctrl, controller-runtime and client-go in turn, each as its own process
// (cmd/shapes-ctrl, cmd/shapes-cr, cmd/shapes-raw) with two controllers on
// one cache: slow, whose reconcile waits or computes without a request to
// the API server (package shapes), and fast, which records when it first
// reconciles each write. A writer patches every object -rounds times at
// -rate patches a second; the driver reports fast's lag from each patch's
// return to that reconcile, slow's reconciles and the process's CPU, for
// every variant of slow's reconcile, repeating the sequence R times, and
// reports medians.
//
//	cd bench && go run ./cmd/shapes                     # R=3, every variant (about 12 minutes)
//	go run ./cmd/shapes -r 1 -variants wait30ms          # a quick run (about a minute)
//	go run ./cmd/shapes -bin /path/to/bin                # kube-apiserver and etcd from there
//	go run ./cmd/shapes -write                           # also write its section of ../BENCHMARKS.md
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
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
	"github.com/typedctrl/ctrl/bench/internal/controlplane"
	"github.com/typedctrl/ctrl/bench/internal/proc"
	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

// impls are the implementations, each the binary cmd/shapes-<name>; raw is
// the base of the ratios.
var impls = []string{"ctrl", "cr", "raw"}

// defaultVariants are the shapes of slow's reconcile, the longest
// last.
const defaultVariants = "none,wait5ms,wait30ms,wait30ms-w4,cpu10ms,wait200ms"

type config struct {
	n, rounds, r int
	rate         float64 // patches per second
	writers      int
	variants     []shapes.Variant
	impls        []string
	namespace    string
	repo         string // root of the ctrl module
	work         string // binaries and logs
	bin          string // kube-apiserver and etcd; "" for ctrltest's default
	note         string
	write        bool

	kubeconfig string // of the running control plane
	spinPerMs  int    // iterations of the busy loop per ms of CPU
}

func main() {
	var c config
	var variants, implList string
	flag.IntVar(&c.n, "n", 200, "number of ConfigMaps")
	flag.IntVar(&c.rounds, "rounds", 2, "writes to every object per run")
	flag.IntVar(&c.r, "r", 3, "repetitions of the whole sequence")
	flag.Float64Var(&c.rate, "rate", 100, "patches per second")
	flag.IntVar(&c.writers, "writers", 4, "goroutines sending the paced patches, so that a slow response does not hold up the next")
	flag.StringVar(&variants, "variants", defaultVariants, "slow's reconciles, comma-separated: none, wait<duration>, cpu<duration>, each with an optional -w<workers> (default 1)")
	flag.StringVar(&implList, "impls", strings.Join(impls, ","), "implementations, comma-separated, from "+strings.Join(impls, ","))
	flag.StringVar(&c.namespace, "namespace", "shapes", "namespace of the objects")
	flag.StringVar(&c.repo, "repo", "..", "root of the github.com/typedctrl/ctrl module")
	flag.StringVar(&c.work, "workdir", filepath.Join(os.TempDir(), "ctrlbench-shapes"), "directory for binaries and logs")
	flag.StringVar(&c.bin, "bin", "", "directory holding kube-apiserver and etcd (default: $CTRL_CONTROLPLANE_BIN, else the checkout's bin/)")
	flag.StringVar(&c.note, "note", "", "a line to print at the top of the section, such as which build a baseline ran on")
	flag.BoolVar(&c.write, "write", false, "write the shapes section of BENCHMARKS.md at the repository root")
	flag.Parse()
	for _, s := range splitList(variants) {
		v, err := shapes.ParseVariant(s)
		if err != nil {
			fatal(err)
		}
		c.variants = append(c.variants, v)
	}
	c.impls = splitList(implList)
	for _, impl := range c.impls {
		if !slices.Contains(impls, impl) {
			fatal(fmt.Errorf("unknown implementation %q (want some of %s)", impl, strings.Join(impls, ",")))
		}
	}
	if c.n <= 0 || c.rounds <= 0 || c.r <= 0 || c.rate <= 0 || c.writers <= 0 || len(c.variants) == 0 || len(c.impls) == 0 {
		fatal(errors.New("-n, -rounds, -r, -rate and -writers must be positive, -variants and -impls not empty"))
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
	fmt.Fprintln(os.Stderr, "shapes:", err)
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
	if c.bin != "" {
		// runcontrolplane finds the binaries through ctrltest, which reads
		// this variable.
		dir, err := filepath.Abs(c.bin)
		if err != nil {
			return err
		}
		os.Setenv("CTRL_CONTROLPLANE_BIN", dir)
	}
	for _, dir := range []string{filepath.Join(c.work, "bin"), filepath.Join(c.work, "logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	res := &results{cfg: c, run: benchdoc.Begin(c.repo)}

	logf("building the control plane command and %d implementations", len(c.impls))
	cpBin := filepath.Join(c.work, "bin", "controlplane")
	if err := controlplane.Build(c.repo, cpBin); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, impl := range c.impls {
		bins[impl] = filepath.Join(c.work, "bin", "shapes-"+impl)
		cmd := exec.Command("go", "build", "-trimpath", "-o", bins[impl], "./cmd/shapes-"+impl)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/shapes-%s: %w", impl, err)
		}
	}
	if c.spinPerMs, err = shapes.Calibrate(); err != nil {
		return err
	}
	res.cfg.spinPerMs = c.spinPerMs
	logf("busy loop: %d iterations per ms of CPU", c.spinPerMs)

	logf("starting the control plane")
	cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", "controlplane.log"), nil)
	if err != nil {
		return err
	}
	defer cp.Stop()
	c.kubeconfig = cp.Kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	// The driver is not measured: its writes are paced, not rate limited.
	cfg.QPS, cfg.Burst = 10000, 20000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := createObjects(ctx, cs, c); err != nil {
		return err
	}

	var base int64 // objects are at 0; every run gets fresh sequence numbers
	for rep := 1; rep <= c.r; rep++ {
		for _, v := range c.variants {
			for _, impl := range c.impls {
				logf("rep %d/%d: %s, %s", rep, c.r, v.Describe(), impl)
				rr, err := runOne(ctx, cs, c, impl, bins[impl], v, rep, base)
				if err != nil {
					return fmt.Errorf("rep %d, %s, %s: %w", rep, v, impl, err)
				}
				base += int64(c.n * c.rounds)
				res.runs = append(res.runs, rr)
				logf("  %s", rr.summary())
			}
		}
	}
	res.run.Finish()

	fmt.Println(res.table())
	fmt.Println(res.targets())
	fmt.Println(res.runTable())
	fmt.Printf("load average before: %s, after: %s; took %s\n", res.run.LoadBefore, res.run.LoadAfter,
		res.run.Finished.Sub(res.run.Started).Round(time.Second))
	if c.write {
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "shapes", res.document()); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}

// runOne runs one implementation with one variant through the protocol of
// package shapes; this run's writes are base+1 .. base+N*rounds.
func runOne(ctx context.Context, cs kubernetes.Interface, c config, impl, bin string, v shapes.Variant, rep int, base int64) (runResult, error) {
	rr := runResult{impl: impl, variant: v, rep: rep}
	args := []string{
		"-kubeconfig", c.kubeconfig,
		"-namespace", c.namespace,
		"-n", strconv.Itoa(c.n),
		"-seq-base", strconv.FormatInt(base, 10),
		"-rounds", strconv.Itoa(c.rounds),
		"-variant", v.String(),
		"-spin-per-ms", strconv.Itoa(c.spinPerMs),
	}
	logPath := filepath.Join(c.work, "logs", fmt.Sprintf("%s-%s-r%d.log", impl, v, rep))
	pp, err := proc.Start[shapes.Event](bin, args, nil, logPath)
	if err != nil {
		return rr, err
	}
	defer pp.Kill()
	p := process{pp}
	if _, err := p.expect("ready"); err != nil {
		return rr, err
	}
	if err := p.Send("begin"); err != nil {
		return rr, err
	}
	if _, err := p.expect("begun"); err != nil {
		return rr, err
	}
	writes, err := writeAll(ctx, cs, c, base)
	if err != nil {
		return rr, err
	}
	if err := p.Send("wait"); err != nil {
		return rr, err
	}
	if _, err := p.expect("caught-up"); err != nil {
		return rr, err
	}
	if err := p.Send("end"); err != nil {
		return rr, err
	}
	e, err := p.expect("report")
	if err != nil {
		return rr, err
	}
	if e.Report == nil {
		return rr, errors.New("report event without a report")
	}
	if err := p.Wait(time.Minute); err != nil {
		return rr, fmt.Errorf("after its report: %w", err)
	}
	return measure(rr, writes, *e.Report)
}
