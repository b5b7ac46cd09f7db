// Command faults measures how long controllers take to recover from
// control-plane faults: it starts a real kube-apiserver and etcd and runs
// the mirror controllers of package mirror (ctrl, controller-runtime,
// client-go) in turn, each as its own process, through up to three
// scenarios (-scenarios), each on a control plane of its own:
//
//   - faults: writers change the sources at a steady rate while the API
//     server is killed and restarted and the controller is paused, once
//     across an API server restart, on an API server that compacts every
//     few seconds and serves ConfigMap watches from etcd, so that the
//     paused watch comes back to 410 Gone. After the writes stop the driver
//     polls the server until every source is mirrored and reports the
//     seconds from the end of the last fault to convergence.
//   - stop: the writes stop at the last fault, an API server kill while
//     every source has a change the controller has not mirrored, so every
//     reconcile fails during the outage and nothing written later rescues
//     a source waiting in a retry backoff. Reported: the seconds from the
//     API server ready again to each source's mirror matching it.
//   - blackhole: the controller reaches the API server through a TCP proxy
//     that, at a fixed time, makes every open connection go silently dead
//     while new ones pass; the writes go on. Reported: the seconds until
//     the controller has caught up again.
//
// For example:
//
//	cd bench && go run ./cmd/faults                                 # all three scenarios, 1000 objects, R=2
//	go run ./cmd/faults -objects 200 -duration 30s -kills 1 -pauses 1 -r 1   # a quick smoke run
//	go run ./cmd/faults -scenarios stop,blackhole -r 1              # only the newer scenarios
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

// scenarioNames are the scenarios -scenarios chooses from, in the order
// they run.
var scenarioNames = []string{"faults", "stop", "blackhole"}

func implNames() []string {
	var names []string
	for _, i := range impls {
		names = append(names, i.name)
	}
	return names
}

type config struct {
	scenarios  []string
	objects    int
	duration   time.Duration
	rate       int // writes per second
	writers    int
	kills      int
	pauses     int
	down       time.Duration // how long each kill keeps the API server down
	pauseFor   time.Duration
	compaction time.Duration
	stopWrites time.Duration // scenario stop: how long the random writes go on before the last fault
	holeAt     time.Duration // scenario blackhole: when the connections go dead, after the start of the writes
	holeWrites time.Duration // scenario blackhole: the longest the writes go on after it
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
	var names, scens string
	flag.StringVar(&scens, "scenarios", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated, from "+strings.Join(scenarioNames, ",")+"; -write replaces the whole section with those run")
	flag.IntVar(&c.objects, "objects", 1000, "number of source ConfigMaps")
	flag.DurationVar(&c.duration, "duration", 90*time.Second, "how long the writers run, faults included")
	flag.IntVar(&c.rate, "writes", 200, "writes per second to the sources")
	flag.IntVar(&c.writers, "writers", 16, "parallel writers sharing the write rate")
	flag.IntVar(&c.kills, "kills", 4, "times the API server is killed with SIGKILL and restarted")
	flag.IntVar(&c.pauses, "pauses", 2, "times the controller is paused with SIGSTOP; the last pause spans one of the kills")
	flag.DurationVar(&c.down, "down", 5*time.Second, "how long each kill keeps the API server down before it is restarted")
	flag.DurationVar(&c.pauseFor, "pause", 15*time.Second, "how long each pause lasts")
	flag.DurationVar(&c.compaction, "compaction", 5*time.Second, "kube-apiserver --etcd-compaction-interval in the scenario faults")
	flag.DurationVar(&c.stopWrites, "stop-writes", 10*time.Second, "scenario stop: how long the random writes go on before the last fault")
	flag.DurationVar(&c.holeAt, "blackhole-at", 10*time.Second, "scenario blackhole: when the connections go dead, after the start of the writes")
	flag.DurationVar(&c.holeWrites, "blackhole-writes", 90*time.Second, "scenario blackhole: the writes go on after the blackhole until the controller has caught up and kept up for "+keepUp.String()+", at most this long")
	flag.IntVar(&c.reps, "r", 2, "repetitions of the whole sequence of implementations")
	flag.StringVar(&names, "impls", strings.Join(implNames(), ","), "implementations to run, comma-separated, from "+strings.Join(implNames(), ","))
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up waiting for convergence this long after the writes stop (stop: after the API server is ready)")
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
	var chosen []string
	for _, name := range strings.Split(scens, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(scenarioNames, name) {
			fatal(fmt.Errorf("unknown scenario %q (want some of %s)", name, strings.Join(scenarioNames, ",")))
		}
		chosen = append(chosen, name)
	}
	for _, name := range scenarioNames { // in their order, whatever the flag's
		if slices.Contains(chosen, name) {
			c.scenarios = append(c.scenarios, name)
		}
	}
	if len(c.scenarios) == 0 || len(c.impls) == 0 {
		fatal(errors.New("no scenario or no implementation to run"))
	}
	if c.objects <= 0 || c.rate <= 0 || c.writers <= 0 || c.reps <= 0 || c.kills < 0 || c.pauses < 0 || c.duration <= 0 ||
		c.stopWrites <= 0 || c.holeAt <= 0 || c.holeWrites <= 0 {
		fatal(errors.New("-objects, -writes, -writers, -r, -duration, -stop-writes, -blackhole-at and -blackhole-writes must be positive, -kills and -pauses not negative"))
	}
	if slices.Contains(c.scenarios, "faults") {
		if _, err := plan(c); err != nil {
			fatal(err)
		}
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

// stopAPIServerFlags serve ConfigMap watches from etcd, which is compacted
// every 5 minutes (the default), so that a watch resumes where it stopped
// after the API server is restarted. A restarted API server's watch cache
// starts at the current revision: a watch resuming from before the kill
// would get 410 Gone, and the relist would hand the controller every source
// again, hiding the retry backoff the scenario measures.
var stopAPIServerFlags = []string{"--watch-cache-sizes=configmaps#0"}

// flagsFor returns the kube-apiserver flags, added to testenv's, of a
// scenario's control plane; the scenario blackhole runs on the defaults.
func (c config) flagsFor(scenario string) []string {
	switch scenario {
	case "faults":
		return c.apiserverFlags()
	case "stop":
		return stopAPIServerFlags
	}
	return nil
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

	for _, sc := range c.scenarios {
		if err := runScenario(ctx, c, sc, cpBin, res); err != nil {
			return err
		}
	}
	res.run.Finish()
	logf("load average after: %s", res.run.LoadAfter)

	fmt.Println(res.tables())
	if c.write {
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "faults", res.document()); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}

// runScenario starts a control plane for the scenario and runs every
// implementation through it, R times, interleaved.
func runScenario(ctx context.Context, c config, scenario, cpBin string, res *results) error {
	flags := c.flagsFor(scenario)
	logf("scenario %s: starting the control plane with %s", scenario, strings.Join(append([]string{"testenv's flags"}, flags...), " "))
	cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", "controlplane-"+scenario+".log"), flags)
	if err != nil {
		return err
	}
	defer cp.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return err
	}
	// The driver is not measured: no client-side throttling, and a bound on
	// each request so that none hangs across an outage. The tracker's watch
	// has no bound: a client timeout would cut it.
	cfg.QPS, cfg.Burst = 10000, 20000
	watchCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for rep := 1; rep <= c.reps; rep++ {
		for _, name := range c.impls {
			logf("%s, rep %d/%d: %s", scenario, rep, c.reps, name)
			r := &runner{cfg: c, cs: cs, watchCS: watchCS, cp: cp, impl: name, rep: rep,
				bin: filepath.Join(c.work, "bin", "mirror-"+name), kubeconfig: cp.Kubeconfig()}
			var summary string
			switch scenario {
			case "faults":
				rr, err := r.run(ctx)
				if err != nil {
					return fmt.Errorf("%s, rep %d, %s: %w", scenario, rep, name, err)
				}
				res.runs = append(res.runs, rr)
				summary = rr.summary()
			case "stop":
				rr, err := r.runStop(ctx)
				if err != nil {
					return fmt.Errorf("%s, rep %d, %s: %w", scenario, rep, name, err)
				}
				res.stops = append(res.stops, rr)
				summary = rr.summary()
			case "blackhole":
				rr, err := r.runBlackhole(ctx)
				if err != nil {
					return fmt.Errorf("%s, rep %d, %s: %w", scenario, rep, name, err)
				}
				res.holes = append(res.holes, rr)
				summary = rr.summary()
			}
			logf("  %s", summary)
		}
	}
	return nil
}
