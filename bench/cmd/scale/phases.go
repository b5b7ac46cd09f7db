package main

import (
	"context"
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
	"github.com/typedctrl/ctrl/bench/internal/probe"
)

// driver is one invocation: its configuration, clients and results.
type driver struct {
	c          config
	cs         kubernetes.Interface
	kubeconfig string
	bins       map[string]string // binary name -> path
	round      int               // the last round written to the Pods
	res        *results
}

func run(c config) error {
	var err error
	if c.Repo, err = filepath.Abs(c.Repo); err != nil {
		return err
	}
	if c.ProfileDir != "" {
		if c.ProfileDir, err = filepath.Abs(c.ProfileDir); err != nil {
			return err
		}
		if err := os.MkdirAll(c.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	for _, dir := range []string{filepath.Join(c.Work, "bin"), filepath.Join(c.Work, "logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	d := &driver{c: c, bins: map[string]string{}, res: &results{Cfg: c, Run: benchdoc.Begin(c.Repo), CreateSeconds: map[int]float64{}}}

	logf("building the control plane command and the controllers")
	cpBin := filepath.Join(c.Work, "bin", "controlplane")
	if err := controlplane.Build(c.Repo, cpBin); err != nil {
		return err
	}
	for _, bin := range []string{"scale-ctrl", "scale-cr", "scale-raw"} {
		out := filepath.Join(c.Work, "bin", bin)
		cmd := exec.Command("go", "build", "-o", out, "-trimpath", "-ldflags=-s -w", "./cmd/"+bin)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w", bin, err)
		}
		d.bins[bin] = out
	}
	for bin, path := range extraBins {
		d.bins[bin] = path
	}

	logf("starting the control plane")
	cp, err := controlplane.Start(cpBin, filepath.Join(c.Work, "logs", "controlplane.log"), c.APIServerFlags)
	if err != nil {
		return err
	}
	defer cp.Stop()
	d.kubeconfig = cp.Kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	if err != nil {
		return err
	}
	// The driver is not measured: let it write as fast as the server takes it.
	cfg.QPS, cfg.Burst = 10000, 20000
	if d.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := d.phases(); err != nil {
		// What was measured before the failure is kept for -render.
		if serr := d.res.save(filepath.Join(c.Work, "results.json")); serr == nil {
			logf("saved the results so far in %s", filepath.Join(c.Work, "results.json"))
		}
		return err
	}
	d.res.Run.Finish()
	if err := d.res.save(filepath.Join(c.Work, "results.json")); err != nil {
		return err
	}
	md := d.res.document()
	fmt.Println(md)
	fmt.Printf("load average before: %s, after: %s\n", d.res.Run.LoadBefore, d.res.Run.LoadAfter)
	if c.Write {
		if err := d.res.writeCharts(filepath.Join(c.Repo, c.Charts)); err != nil {
			return err
		}
		path := filepath.Join(c.Repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "scale", md); err != nil {
			return err
		}
		logf("wrote %s and the charts in %s", path, filepath.Join(c.Repo, c.Charts))
	}
	return nil
}

// phases runs the phases of the benchmark against the running control plane.
func (d *driver) phases() error {
	c := d.c
	ctx := context.Background()
	if err := createNamespace(ctx, d.cs, c.Namespace); err != nil {
		return err
	}

	has := func(ph string) bool { return slices.Contains(c.Phases, ph) }
	created := 0
	grow := func(n int) error {
		if n <= created {
			return nil
		}
		t0 := time.Now()
		if err := createPods(ctx, d.cs, c.Namespace, created, n, c.Writers); err != nil {
			return err
		}
		s := time.Since(t0).Seconds()
		d.res.CreateSeconds[n] = s
		logf("created Pods %d..%d in %.1fs (%.0f/s)", created, n-1, s, float64(n-created)/s)
		created = n
		return nil
	}
	if has("memory") {
		for _, n := range c.Counts {
			if err := grow(n); err != nil {
				return err
			}
			for _, name := range c.MemImpls {
				im, _ := implNamed(name)
				r, err := d.runOnce(ctx, im, n, variant{}, false, "mem-"+strconv.Itoa(n))
				if err != nil {
					return fmt.Errorf("%s at %d Pods: %w", name, n, err)
				}
				d.res.Mem = append(d.res.Mem, r)
			}
		}
	}
	top := c.Counts[len(c.Counts)-1]
	if has("update") || has("knobs") || has("profile") {
		if err := grow(top); err != nil {
			return err
		}
	}
	if has("update") {
		for rep := 1; rep <= c.R; rep++ {
			for _, name := range c.UpdateImpls {
				im, _ := implNamed(name)
				r, err := d.runOnce(ctx, im, top, variant{}, true, "upd-r"+strconv.Itoa(rep))
				if err != nil {
					return fmt.Errorf("update run %d of %s: %w", rep, name, err)
				}
				r.Rep = rep
				d.res.Upd = append(d.res.Upd, r)
			}
		}
	}
	if has("knobs") {
		for _, k := range c.Knobs {
			name, setting := k[0], k[1]
			im, _ := implNamed(name)
			v := variant{name: setting}
			switch {
			case setting == "GOMEMLIMIT":
				base, ok := d.res.median(d.res.Upd, name, top, mHeapSync)
				if !ok {
					r, err := d.runOnce(ctx, im, top, variant{}, true, "knob-default")
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					d.res.Upd = append(d.res.Upd, r)
					base = mHeapSync.get(r)
				}
				limit := int64(base*1.2) >> 20
				v.name = fmt.Sprintf("GOMEMLIMIT=%dMiB", limit)
				v.env = []string{v.name}
			case strings.HasPrefix(setting, "container="):
				f, err := strconv.ParseFloat(strings.TrimPrefix(setting, "container="), 64)
				if err != nil {
					return err
				}
				base, ok := d.res.median(d.res.Upd, name, top, mHeapSync)
				if !ok {
					return fmt.Errorf("%s: a container run needs the default update runs of the same implementation", name)
				}
				v.limit = int64(base * f)
				budget := "ctrl's default budget"
				if im.bin != "scale-ctrl" {
					budget = "no memory budget of its own"
				}
				v.name = fmt.Sprintf("container limit %.1fx heap (%d MiB), %s", f, v.limit>>20, budget)
			case strings.HasPrefix(setting, "sync-gogc="):
				n := strings.TrimPrefix(setting, "sync-gogc=")
				v.name = "GOGC=" + n + " until all reconciled once"
				v.Args = []string{"-sync-gogc", n}
			default:
				v.env = []string{setting}
			}
			r, err := d.runOnce(ctx, im, top, v, true, "knob")
			if err != nil {
				return fmt.Errorf("%s with %s: %w", name, v.name, err)
			}
			d.res.Knobs = append(d.res.Knobs, r)
		}
	}
	if has("profile") {
		dir := filepath.Join(c.Work, "profiles")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, name := range c.ProfImpls {
			im, _ := implNamed(name)
			v := variant{name: "profiled", Args: []string{"-profile-dir", dir, "-profile-tag", "prof"}}
			r, err := d.runOnce(ctx, im, top, v, true, "prof")
			if err != nil {
				return fmt.Errorf("profile of %s: %w", name, err)
			}
			prof := filepath.Join(dir, fmt.Sprintf("%s-prof-cpu-update.pprof", im.name))
			cats, all, err := breakdown(prof)
			if err != nil {
				return err
			}
			d.res.Profiles = append(d.res.Profiles, profileRun{Run: r, Path: prof, Cats: cats, All: all})
		}
	}
	if has("shard") {
		if err := d.shardPhase(ctx); err != nil {
			return err
		}
	}
	return nil
}

// variant is a run of an implementation with other runtime settings.
type variant struct {
	name  string
	env   []string // GOGC, GOMEMLIMIT
	Args  []string
	limit int64 // run in a memory cgroup of this limit
}

// memRun is one process of one implementation.
type memRun struct {
	Impl     string
	Variant  string
	N        int // Pods cached
	Rep      int
	Startup  float64 // spawn to main, s
	First    float64 // main to every Pod reconciled once, s
	Synced   probe.Mem
	Updated  *probe.Mem // after the update rounds
	Events   int        // watch events in the update phase
	CPU      float64    // user+sys s in the update phase
	GCs      uint32
	Alloc    uint64 // heap bytes allocated in the update phase
	RoundsS  []float64
	PatchesS float64
	// In a memory cgroup: its limit, the most it was charged, and the
	// processes the kernel killed for it.
	Limit, CgroupPeak int64
	OOMKills          int
	// Killed: the kernel killed the process for its cgroup's limit
	// before the run ended; nothing after that was measured.
	Killed bool
}

// runOnce runs impl over n Pods until each was reconciled once, measures
// it, and, if updates, writes c.G rounds to the first c.UpdateN Pods.
func (d *driver) runOnce(ctx context.Context, im impl, n int, v variant, updates bool, tag string) (memRun, error) {
	r := memRun{Impl: im.name, Variant: v.name, N: n}
	args := []string{"-kubeconfig", d.kubeconfig, "-namespace", d.c.Namespace, "-n", strconv.Itoa(n), "-mode", im.mode}
	args = append(args, v.Args...)
	if d.c.ProfileDir != "" && v.name != "profiled" {
		args = append(args, "-profile-dir", d.c.ProfileDir, "-profile-tag", fmt.Sprintf("%d-%s", n, tag))
	}
	label := im.name
	if v.name != "" {
		label += " " + v.name
	}
	logf("%s: %d Pods%s", label, n, map[bool]string{true: fmt.Sprintf(", %d rounds over %d of them", d.c.G, d.c.UpdateN)}[updates])
	logPath := filepath.Join(d.c.Work, "logs", fmt.Sprintf("%s-%d-%s.log", im.name, n, tag))
	bin := d.bins[im.bin]
	var cg *memCgroup
	if v.limit > 0 {
		var err error
		if cg, err = newMemCgroup(fmt.Sprintf("ctrlbench-%d-%s", os.Getpid(), im.name), v.limit); err != nil {
			return r, err
		}
		defer cg.remove()
		bin, args = cg.wrap(bin, args)
	}
	p, err := probe.Start(bin, args, v.env, logPath)
	if err != nil {
		return r, err
	}
	defer p.Kill()
	// killed turns a container run's failure into its result when the
	// kernel killed the process for the limit: what the run shows.
	killed := func(err error) (memRun, error) {
		if cg == nil || cg.oomKills() == 0 {
			return r, err
		}
		r.Killed, r.Limit, r.CgroupPeak, r.OOMKills = true, v.limit, cg.peak(), cg.oomKills()
		logf("  killed for the container's limit (%s MiB; %d OOM kills): %v", mibI(r.Limit), r.OOMKills, err)
		return r, nil
	}
	a, err := p.Do("first " + strconv.Itoa(n))
	if err != nil {
		return killed(err)
	}
	r.First = a.Seconds
	r.Startup = time.Unix(0, a.MainUnix).Sub(p.Spawned).Seconds()
	if a, err = p.Do("measure"); err != nil {
		return killed(err)
	}
	r.Synced = *a.Mem
	if updates {
		if _, err := p.Do("begin"); err != nil {
			return killed(err)
		}
		var patchS float64
		for range d.c.G {
			d.round++
			t0 := time.Now()
			if err := patchRound(ctx, d.cs, d.c.Namespace, "pod", d.c.UpdateN, d.round, d.c.Writers); err != nil {
				return r, err
			}
			patchS += time.Since(t0).Seconds()
			if _, err := p.Do(fmt.Sprintf("round %d %d", d.round, d.c.UpdateN)); err != nil {
				return killed(err)
			}
			r.RoundsS = append(r.RoundsS, time.Since(t0).Seconds())
		}
		r.PatchesS = patchS
		if a, err = p.Do("end"); err != nil {
			return killed(err)
		}
		r.CPU, r.GCs, r.Alloc, r.Events = a.UserSeconds+a.SysSeconds, a.GCs, a.Allocated, d.c.UpdateN*d.c.G
		if a, err = p.Do("measure"); err != nil {
			return killed(err)
		}
		r.Updated = a.Mem
	}
	if err := p.Exit(); err != nil {
		return killed(fmt.Errorf("exit: %w", err))
	}
	if cg != nil {
		r.Limit, r.CgroupPeak, r.OOMKills = v.limit, cg.peak(), cg.oomKills()
		logf("  container limit %s MiB, most charged %s MiB, OOM kills %d", mibI(r.Limit), mibI(r.CgroupPeak), r.OOMKills)
	}
	logf("  all once %.1fs, heap %s (%s) MiB, rss %s MiB, peak rss %s MiB%s", r.First, mib(r.Synced.HeapInuse), mib(r.Synced.HeapAlloc),
		mibI(r.Synced.RSS), mibI(r.peakRSS()), map[bool]string{true: fmt.Sprintf(", %.3f CPU s per 1k updates, %d GCs, %.1f KiB allocated per update", r.cpuPer1k(), r.GCs, r.allocPer())}[updates])
	return r, nil
}

// peakRSS is ru_maxrss at the end of the run.
func (r memRun) peakRSS() int64 {
	if r.Updated != nil {
		return r.Updated.MaxRSS
	}
	return r.Synced.MaxRSS
}

func (r memRun) cpuPer1k() float64 {
	if r.Events == 0 {
		return 0
	}
	return r.CPU / (float64(r.Events) / 1000)
}

// allocPer is the heap allocated per update event, in KiB: the garbage
// each event leaves for the collector, but for what stays cached.
func (r memRun) allocPer() float64 {
	if r.Events == 0 {
		return 0
	}
	return float64(r.Alloc) / float64(r.Events) / 1024
}
