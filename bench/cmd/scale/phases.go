package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if c.repo, err = filepath.Abs(c.repo); err != nil {
		return err
	}
	if c.profileDir != "" {
		if c.profileDir, err = filepath.Abs(c.profileDir); err != nil {
			return err
		}
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
	}
	for _, dir := range []string{filepath.Join(c.work, "bin"), filepath.Join(c.work, "logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	d := &driver{c: c, bins: map[string]string{}, res: &results{cfg: c, run: benchdoc.Begin(c.repo), createSeconds: map[int]float64{}}}

	logf("building the control plane command and the controllers")
	cpBin := filepath.Join(c.work, "bin", "controlplane")
	if err := controlplane.Build(c.repo, cpBin); err != nil {
		return err
	}
	for _, bin := range []string{"scale-ctrl", "scale-cr", "scale-raw"} {
		out := filepath.Join(c.work, "bin", bin)
		cmd := exec.Command("go", "build", "-o", out, "-trimpath", "-ldflags=-s -w", "./cmd/"+bin)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w", bin, err)
		}
		d.bins[bin] = out
	}

	logf("starting the control plane")
	cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", "controlplane.log"), nil)
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
	ctx := context.Background()
	if err := createNamespace(ctx, d.cs, c.namespace); err != nil {
		return err
	}

	has := func(ph string) bool { return slices.Contains(c.phases, ph) }
	created := 0
	grow := func(n int) error {
		if n <= created {
			return nil
		}
		t0 := time.Now()
		if err := createPods(ctx, d.cs, c.namespace, created, n, c.writers); err != nil {
			return err
		}
		s := time.Since(t0).Seconds()
		d.res.createSeconds[n] = s
		logf("created Pods %d..%d in %.1fs (%.0f/s)", created, n-1, s, float64(n-created)/s)
		created = n
		return nil
	}
	if has("memory") {
		for _, n := range c.counts {
			if err := grow(n); err != nil {
				return err
			}
			for _, name := range c.memImpls {
				im, _ := implNamed(name)
				r, err := d.runOnce(ctx, im, n, variant{}, false, "mem-"+strconv.Itoa(n))
				if err != nil {
					return fmt.Errorf("%s at %d Pods: %w", name, n, err)
				}
				d.res.mem = append(d.res.mem, r)
			}
		}
	}
	top := c.counts[len(c.counts)-1]
	if has("update") || has("knobs") {
		if err := grow(top); err != nil {
			return err
		}
	}
	if has("update") {
		for rep := 1; rep <= c.r; rep++ {
			for _, name := range c.updateImpls {
				im, _ := implNamed(name)
				r, err := d.runOnce(ctx, im, top, variant{}, true, "upd-r"+strconv.Itoa(rep))
				if err != nil {
					return fmt.Errorf("update run %d of %s: %w", rep, name, err)
				}
				r.rep = rep
				d.res.upd = append(d.res.upd, r)
			}
		}
	}
	if has("knobs") {
		for _, name := range c.knobImpls {
			im, _ := implNamed(name)
			base, ok := d.res.median(d.res.upd, name, top, mHeapSync)
			if !ok {
				r, err := d.runOnce(ctx, im, top, variant{}, true, "knob-default")
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				d.res.upd = append(d.res.upd, r)
				base = mHeapSync.get(r)
			}
			limit := int64(base*1.2) >> 20 << 20
			for _, v := range []variant{
				{name: "GOGC=50", env: []string{"GOGC=50"}},
				{name: fmt.Sprintf("GOMEMLIMIT=%dMiB", limit>>20), env: []string{fmt.Sprintf("GOMEMLIMIT=%dMiB", limit>>20)}},
				{name: "GOGC=25 until synced", args: []string{"-sync-gogc", "25"}},
			} {
				r, err := d.runOnce(ctx, im, top, v, true, "knob")
				if err != nil {
					return fmt.Errorf("%s with %s: %w", name, v.name, err)
				}
				d.res.knobs = append(d.res.knobs, r)
			}
		}
	}
	if has("shard") {
		if err := d.shardPhase(ctx); err != nil {
			return err
		}
	}
	d.res.run.Finish()

	md := d.res.document()
	fmt.Println(md)
	fmt.Printf("load average before: %s, after: %s\n", d.res.run.LoadBefore, d.res.run.LoadAfter)
	if c.write {
		if err := d.res.writeCharts(filepath.Join(c.repo, c.charts)); err != nil {
			return err
		}
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "scale", md); err != nil {
			return err
		}
		logf("wrote %s and the charts in %s", path, filepath.Join(c.repo, c.charts))
	}
	return nil
}

// variant is a run of an implementation with other runtime settings.
type variant struct {
	name string
	env  []string // GOGC, GOMEMLIMIT
	args []string
}

// memRun is one process of one implementation.
type memRun struct {
	impl     string
	variant  string
	n        int // Pods cached
	rep      int
	startup  float64 // spawn to main, s
	first    float64 // main to every Pod reconciled once, s
	synced   probe.Mem
	updated  *probe.Mem // after the update rounds
	events   int        // watch events in the update phase
	cpu      float64    // user+sys s in the update phase
	gcs      uint32
	roundsS  []float64
	patchesS float64
}

// runOnce runs impl over n Pods until each was reconciled once, measures
// it, and, if updates, writes c.g rounds to the first c.updateN Pods.
func (d *driver) runOnce(ctx context.Context, im impl, n int, v variant, updates bool, tag string) (memRun, error) {
	r := memRun{impl: im.name, variant: v.name, n: n}
	args := []string{"-kubeconfig", d.kubeconfig, "-namespace", d.c.namespace, "-n", strconv.Itoa(n), "-mode", im.mode}
	args = append(args, v.args...)
	if d.c.profileDir != "" {
		args = append(args, "-profile-dir", d.c.profileDir, "-profile-tag", fmt.Sprintf("%d-%s", n, tag))
	}
	label := im.name
	if v.name != "" {
		label += " " + v.name
	}
	logf("%s: %d Pods%s", label, n, map[bool]string{true: fmt.Sprintf(", %d rounds over %d of them", d.c.g, d.c.updateN)}[updates])
	logPath := filepath.Join(d.c.work, "logs", fmt.Sprintf("%s-%d-%s.log", im.name, n, tag))
	p, err := probe.Start(d.bins[im.bin], args, v.env, logPath)
	if err != nil {
		return r, err
	}
	defer p.Kill()
	a, err := p.Do("first " + strconv.Itoa(n))
	if err != nil {
		return r, err
	}
	r.first = a.Seconds
	r.startup = time.Unix(0, a.MainUnix).Sub(p.Spawned).Seconds()
	if a, err = p.Do("measure"); err != nil {
		return r, err
	}
	r.synced = *a.Mem
	if updates {
		if _, err := p.Do("begin"); err != nil {
			return r, err
		}
		var patchS float64
		for range d.c.g {
			d.round++
			t0 := time.Now()
			if err := patchRound(ctx, d.cs, d.c.namespace, "pod", d.c.updateN, d.round, d.c.writers); err != nil {
				return r, err
			}
			patchS += time.Since(t0).Seconds()
			if _, err := p.Do(fmt.Sprintf("round %d %d", d.round, d.c.updateN)); err != nil {
				return r, err
			}
			r.roundsS = append(r.roundsS, time.Since(t0).Seconds())
		}
		r.patchesS = patchS
		if a, err = p.Do("end"); err != nil {
			return r, err
		}
		r.cpu, r.gcs, r.events = a.UserSeconds+a.SysSeconds, a.GCs, d.c.updateN*d.c.g
		if a, err = p.Do("measure"); err != nil {
			return r, err
		}
		r.updated = a.Mem
	}
	if err := p.Exit(); err != nil {
		return r, fmt.Errorf("exit: %w", err)
	}
	logf("  all once %.1fs, heap %s (%s) MiB, rss %s MiB, peak rss %s MiB%s", r.first, mib(r.synced.HeapInuse), mib(r.synced.HeapAlloc),
		mibI(r.synced.RSS), mibI(r.peakRSS()), map[bool]string{true: fmt.Sprintf(", %.3f CPU s per 1k updates, %d GCs", r.cpuPer1k(), r.gcs)}[updates])
	return r, nil
}

// peakRSS is ru_maxrss at the end of the run.
func (r memRun) peakRSS() int64 {
	if r.updated != nil {
		return r.updated.MaxRSS
	}
	return r.synced.MaxRSS
}

func (r memRun) cpuPer1k() float64 {
	if r.events == 0 {
		return 0
	}
	return r.cpu / (float64(r.events) / 1000)
}

// shardLeaseHolder returns the identity of the ring's sharder.
func (d *driver) shardLeaseHolder(ctx context.Context, ring string) string {
	l, err := d.cs.CoordinationV1().Leases(d.c.shardNS).Get(ctx, ring+"-sharder", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
