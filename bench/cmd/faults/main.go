// Command faults measures how long controllers take to recover from
// control-plane faults: it starts a real kube-apiserver and etcd that compact
// every few seconds and serve ConfigMap watches from etcd, and runs the
// mirror controllers of package mirror (ctrl, controller-runtime, client-go)
// in turn, each as its own process, through the same scenario: writers
// change the sources at a steady rate while the API server is killed and
// restarted and the controller is paused, once across an API server restart
// so that its watch comes back to 410 Gone. After the writes stop it polls
// the server until every source is mirrored and reports the seconds from the
// end of the last fault to convergence.
//
//	cd bench && go run ./cmd/faults                                 # 1000 objects, 90 s at 200 writes/s, R=2
//	go run ./cmd/faults -objects 200 -duration 30s -kills 1 -pauses 1 -r 1   # a quick smoke run
//	go run ./cmd/faults -write                                      # also write its section of ../BENCHMARKS.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
	"github.com/typedctrl/ctrl/bench/internal/controlplane"
)

// impl is one mirror controller: the binary built from ./cmd/mirror-<name>.
type impl struct {
	name, what string
}

var impls = []impl{
	{"ctrl", "`ctrl.NewController` with `ControllerOptions{Workers: 4, Cache: CacheOptions{LabelSelector: \"role=src\"}}`, reconcile `Client.Apply`, `OnDelete` deletes the mirror"},
	{"cr", "controller-runtime manager, cache restricted to the namespace and to `role=src` ConfigMaps (`cache.ByObject`), `builder.For`, 4 workers; reconcile `client.Get`s the source from the cache, then `client.Apply` or `client.Delete`"},
	{"raw", "client-go shared informer factory for the namespace with a `role=src` tweak, typed rate-limited work queue (`DefaultTypedControllerRateLimiter`), lister, 4 workers, typed clientset `Apply` or `Delete`"},
}

func implNames() []string {
	var names []string
	for _, i := range impls {
		names = append(names, i.name)
	}
	return names
}

type config struct {
	objects    int
	duration   time.Duration
	rate       int // writes per second
	writers    int
	kills      int
	pauses     int
	down       time.Duration // how long each kill keeps the API server down
	pauseFor   time.Duration
	compaction time.Duration
	reps       int
	impls      []string
	timeout    time.Duration // give up waiting for convergence
	namespace  string
	repo       string // root of the ctrl module
	work       string // binaries and logs
	write      bool
}

func main() {
	var c config
	var names string
	flag.IntVar(&c.objects, "objects", 1000, "number of source ConfigMaps")
	flag.DurationVar(&c.duration, "duration", 90*time.Second, "how long the writers run, faults included")
	flag.IntVar(&c.rate, "writes", 200, "writes per second to the sources")
	flag.IntVar(&c.writers, "writers", 16, "parallel writers sharing the write rate")
	flag.IntVar(&c.kills, "kills", 4, "times the API server is killed with SIGKILL and restarted")
	flag.IntVar(&c.pauses, "pauses", 2, "times the controller is paused with SIGSTOP; the last pause spans one of the kills")
	flag.DurationVar(&c.down, "down", 5*time.Second, "how long each kill keeps the API server down before it is restarted")
	flag.DurationVar(&c.pauseFor, "pause", 15*time.Second, "how long each pause lasts")
	flag.DurationVar(&c.compaction, "compaction", 5*time.Second, "kube-apiserver --etcd-compaction-interval")
	flag.IntVar(&c.reps, "r", 2, "repetitions of the whole sequence of implementations")
	flag.StringVar(&names, "impls", strings.Join(implNames(), ","), "implementations to run, comma-separated, from "+strings.Join(implNames(), ","))
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up waiting for convergence this long after the writes stop")
	flag.StringVar(&c.namespace, "namespace", "faults", "namespace of the ConfigMaps")
	flag.StringVar(&c.repo, "repo", "..", "root of the github.com/typedctrl/ctrl module")
	flag.StringVar(&c.work, "workdir", filepath.Join(os.TempDir(), "ctrlbench-faults"), "directory for binaries and logs")
	flag.BoolVar(&c.write, "write", false, "write the faults section of BENCHMARKS.md at the repository root")
	flag.Parse()
	for _, f := range strings.Split(names, ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.impls = append(c.impls, f)
		}
	}
	for _, name := range c.impls {
		if !slices.Contains(implNames(), name) {
			fatal(fmt.Errorf("unknown implementation %q (want some of %s)", name, strings.Join(implNames(), ",")))
		}
	}
	if c.objects <= 0 || c.rate <= 0 || c.writers <= 0 || c.reps <= 0 || c.kills < 0 || c.pauses < 0 || c.duration <= 0 {
		fatal(errors.New("-objects, -writes, -writers, -r and -duration must be positive, -kills and -pauses not negative"))
	}
	if _, err := plan(c); err != nil {
		fatal(err)
	}
	// client-go logs the driver's writes that an outage cuts off: expected
	// here, and counted as failed writes.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "faults:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// apiserverFlags make watches that fall behind get 410 Gone: etcd is
// compacted every few seconds, and ConfigMap watches are served from etcd
// rather than from the API server's watch cache, which would keep their
// history for longer.
func (c config) apiserverFlags() []string {
	return []string{
		"--etcd-compaction-interval=" + c.compaction.String(),
		"--watch-cache-sizes=configmaps#0",
	}
}

func run(ctx context.Context, c config) error {
	var err error
	if c.repo, err = filepath.Abs(c.repo); err != nil {
		return err
	}
	for _, dir := range []string{filepath.Join(c.work, "bin"), filepath.Join(c.work, "logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	res := &results{cfg: c, run: benchdoc.Begin(c.repo)}
	res.plan, _ = plan(c)
	logf("load average before: %s", res.run.LoadBefore)

	logf("building the control plane command and %d mirror controllers", len(c.impls))
	cpBin := filepath.Join(c.work, "bin", "controlplane")
	if err := controlplane.Build(c.repo, cpBin); err != nil {
		return err
	}
	// One go build writes each main package to bin/ under its directory's
	// name: bin/mirror-ctrl and so on.
	args := []string{"build", "-o", filepath.Join(c.work, "bin") + "/"}
	for _, im := range impls {
		if slices.Contains(c.impls, im.name) {
			args = append(args, "./cmd/mirror-"+im.name)
		}
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}

	logf("starting the control plane with %s", strings.Join(c.apiserverFlags(), " "))
	cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", "controlplane.log"), c.apiserverFlags())
	if err != nil {
		return err
	}
	defer cp.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return err
	}
	// The driver is not measured: no client-side throttling, and a bound on
	// each request so that none hangs across an outage.
	cfg.QPS, cfg.Burst = 10000, 20000
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for rep := 1; rep <= c.reps; rep++ {
		for _, name := range c.impls {
			logf("rep %d/%d: %s", rep, c.reps, name)
			r := &runner{cfg: c, cs: cs, cp: cp, impl: name, rep: rep,
				bin: filepath.Join(c.work, "bin", "mirror-"+name), kubeconfig: cp.Kubeconfig()}
			rr, err := r.run(ctx)
			if err != nil {
				return fmt.Errorf("rep %d, %s: %w", rep, name, err)
			}
			res.runs = append(res.runs, rr)
			logf("  %s", rr.summary())
		}
	}
	res.run.Finish()
	logf("load average after: %s", res.run.LoadAfter)

	fmt.Println(res.table())
	fmt.Println(res.target())
	fmt.Println(res.runTable())
	if c.write {
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "faults", res.document()); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}
