package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
)

// results are everything one invocation measured.
type results struct {
	Cfg                config
	Run                *benchdoc.Run
	CreateSeconds      map[int]float64 // Pods created up to the count, in seconds
	ShardCreateSeconds float64
	Mem                []memRun // one per implementation and count
	Upd                []memRun // update runs at the largest count
	Knobs              []memRun
	Profiles           []profileRun
	Shard              []replicaRun
}

type metric struct {
	name string
	get  func(memRun) float64
}

var (
	mHeapSync = metric{"heap", func(r memRun) float64 { return float64(r.Synced.HeapInuse) }}
	mCPU      = metric{"CPU per update", func(r memRun) float64 { return r.cpuPer1k() }}
)

// median returns the median of m over the runs of impl at n Pods.
func (res *results) median(runs []memRun, impl string, n int, m metric) (float64, bool) {
	var vs []float64
	for _, r := range runs {
		if r.Impl == impl && r.N == n && r.Variant == "" {
			vs = append(vs, m.get(r))
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}

func (res *results) memRun(impl string, n int) (memRun, bool) {
	for _, r := range res.Mem {
		if r.Impl == impl && r.N == n {
			return r, true
		}
	}
	return memRun{}, false
}

func mib(b uint64) string  { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
func mibI(b int64) string  { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
func kib(b float64) string { return fmt.Sprintf("%.2f", b/1024) }
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func (res *results) top() int { return res.Cfg.Counts[len(res.Cfg.Counts)-1] }

// memoryTable is the memory of every implementation at every count.
func (res *results) memoryTable() string {
	var b strings.Builder
	b.WriteString("| implementation | Pods | all reconciled once s | CPU s until then | heap MiB | live heap MiB | heap per Pod KiB | RSS once synced MiB | peak RSS MiB | peak RSS / heap | goroutines |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, name := range res.Cfg.MemImpls {
		for _, n := range res.Cfg.Counts {
			r, ok := res.memRun(name, n)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %d |\n", name, n, r.First, r.Synced.CPU,
				mib(r.Synced.HeapInuse), mib(r.Synced.HeapAlloc), kib(res.perObject(name, n)), mibI(r.Synced.RSS), mibI(r.peakRSS()),
				ratio(float64(r.peakRSS()), float64(r.Synced.HeapInuse)), r.Synced.Goroutines)
		}
	}
	return b.String()
}

// perObject is the heap per Pod: the slope of HeapInuse between the
// smallest and the largest count, which leaves out what a process holds
// with no objects (its binary's data, client and scheme). With one count,
// the heap over the count.
func (res *results) perObject(impl string, n int) float64 {
	lo, top := res.Cfg.Counts[0], res.top()
	a, okA := res.memRun(impl, lo)
	z, okZ := res.memRun(impl, top)
	if !okA || !okZ || lo == top {
		if r, ok := res.memRun(impl, n); ok {
			return float64(r.Synced.HeapInuse) / float64(n)
		}
		return 0
	}
	return (float64(z.Synced.HeapInuse) - float64(a.Synced.HeapInuse)) / float64(top-lo)
}

// updateTable is every update run.
func (res *results) updateTable(runs []memRun, withVariant bool) string {
	var b strings.Builder
	b.WriteString("| rep | implementation | all once s | CPU s until then | heap once synced MiB | heap after updates MiB | peak RSS MiB | peak RSS / heap once synced | CPU s per 1k updates | update CPU s | GCs in updates | KiB allocated per update | round wall s |\n")
	b.WriteString("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range runs {
		name := r.Impl
		if withVariant && r.Variant != "" {
			name += ", " + r.Variant
		}
		var rounds []string
		for _, s := range r.RoundsS {
			rounds = append(rounds, fmt.Sprintf("%.1f", s))
		}
		heapAfter := "-"
		if r.Updated != nil {
			heapAfter = mib(r.Updated.HeapInuse)
		}
		rep := "-"
		if r.Rep > 0 {
			rep = fmt.Sprint(r.Rep)
		}
		if r.Killed {
			fmt.Fprintf(&b, "| %s | %s | killed by the kernel for its container's limit of %s MiB (charged at most %s MiB, %d OOM kills) | | | | | | | | | | |\n",
				rep, name, mibI(r.Limit), mibI(r.CgroupPeak), r.OOMKills)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %.3f | %.2f | %d | %.1f | %s |\n", rep, name, r.First, r.Synced.CPU, mib(r.Synced.HeapInuse), heapAfter,
			mibI(r.peakRSS()), ratio(float64(r.peakRSS()), float64(r.Synced.HeapInuse)), r.cpuPer1k(), r.CPU, r.GCs, r.allocPer(), strings.Join(rounds, ", "))
	}
	return b.String()
}

// updateSummary is the median CPU per update of each implementation, and
// its ratio to raw-strip's.
func (res *results) updateSummary() string {
	top := res.top()
	base, okBase := res.median(res.Upd, "raw-strip", top, mCPU)
	var b strings.Builder
	b.WriteString("| implementation | CPU s per 1k updates (median) | vs raw-strip | vs raw-strip-nogzip |\n|---|--:|--:|--:|\n")
	nogzip, okNo := res.median(res.Upd, "raw-strip-nogzip", top, mCPU)
	for _, name := range res.Cfg.UpdateImpls {
		v, ok := res.median(res.Upd, name, top, mCPU)
		if !ok {
			continue
		}
		r1, r2 := "-", "-"
		if okBase {
			r1 = ratio(v, base)
		}
		if okNo {
			r2 = ratio(v, nogzip)
		}
		fmt.Fprintf(&b, "| %s | %.3f | %s | %s |\n", name, v, r1, r2)
	}
	return b.String()
}

// shardTable is every replica of every sharded run.
func (res *results) shardTable() string {
	var b strings.Builder
	b.WriteString("| mode | replicas | replica | objects cached | objects labeled | ring settled s | heap MiB | live heap MiB | heap vs unsharded | heap vs 1 replica | peak RSS MiB | CPU s per 1k own updates | update CPU s | round wall s |\n")
	b.WriteString("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	ref := res.shardHeap(0, "")
	for _, r := range res.Shard {
		mode, replicas, who := r.Mode, fmt.Sprint(r.Replicas), r.Identity
		if r.Replicas == 0 {
			mode, replicas, who = "unsharded", "-", "-"
		}
		var rounds []string
		for _, s := range r.RoundsS {
			rounds = append(rounds, fmt.Sprintf("%.1f", s))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.1f | %s | %s | %s | %s | %s | %.3f | %.2f | %s |\n", mode, replicas, who, r.Owned, r.Labeled, r.Settle,
			mib(r.Synced.HeapInuse), mib(r.Synced.HeapAlloc), ratio(float64(r.Synced.HeapInuse), ref), ratio(float64(r.Synced.HeapInuse), res.shardHeap(1, r.Mode)),
			mibI(r.Updated.MaxRSS), r.cpuPer1k(), r.CPU, strings.Join(rounds, ", "))
	}
	return b.String()
}

// shardHeap is the heap of the only replica of the run with k replicas in
// mode ("" and 0: unsharded).
func (res *results) shardHeap(k int, mode string) float64 {
	for _, r := range res.Shard {
		if r.Replicas == k && (k == 0 || r.Mode == mode) {
			return float64(r.Synced.HeapInuse)
		}
	}
	return 0
}

// worstShard returns the largest heap of a replica at k replicas in mode,
// and the largest CPU per 1k own updates.
func (res *results) worstShard(k int, mode string) (heap, cpu float64, ok bool) {
	for _, r := range res.Shard {
		if r.Replicas == k && r.Mode == mode {
			heap, cpu, ok = max(heap, float64(r.Synced.HeapInuse)), max(cpu, r.cpuPer1k()), true
		}
	}
	return heap, cpu, ok
}

// shardLabeled returns how many objects a ring of mode at k replicas
// labeled.
func (res *results) shardLabeled(k int, mode string) (int, bool) {
	for _, r := range res.Shard {
		if r.Replicas == k && r.Mode == mode {
			return r.Labeled, true
		}
	}
	return 0, false
}

type target struct {
	what     string
	measured float64
	ok       bool // measured
	limit    float64
}

func (res *results) targets() []target {
	top := res.top()
	var ts []target
	p, okP := res.memRun("ctrl-project", top)
	cr, okC := res.memRun("cr-default", top)
	t := target{what: fmt.Sprintf("ctrl-project heap per Pod vs cr-default's, %d to %d Pods", res.Cfg.Counts[0], top), limit: 0.15}
	if okP && okC {
		t.measured, t.ok = res.perObject("ctrl-project", top)/res.perObject("cr-default", top), true
		_ = p
		_ = cr
	}
	ts = append(ts, t)
	base, okB := res.median(res.Upd, "raw-strip", top, mCPU)
	for _, c := range []struct {
		name  string
		limit float64
	}{{"ctrl-meta", 0.6}, {"ctrl-project", 0.6}, {"ctrl-full", 1.0}} {
		v, ok := res.median(res.Upd, c.name, top, mCPU)
		ts = append(ts, target{what: c.name + " CPU per update event vs raw-strip", measured: v / base, ok: ok && okB && base > 0, limit: c.limit})
	}
	for _, name := range res.Cfg.MemImpls {
		if r, ok := res.memRun(name, top); ok {
			ts = append(ts, target{what: fmt.Sprintf("%s peak RSS vs heap once synced, %d Pods", name, top),
				measured: float64(r.peakRSS()) / float64(r.Synced.HeapInuse), ok: true, limit: 1.3})
		}
	}
	for _, mode := range []string{"labels", "server"} {
		one := res.shardHeap(1, mode)
		if one == 0 {
			continue
		}
		k := res.Cfg.Replicas[len(res.Cfg.Replicas)-1]
		if w, _, ok := res.worstShard(k, mode); ok {
			ts = append(ts, target{what: fmt.Sprintf("heap of the largest replica at %d replicas vs 1 replica, mode %s", k, mode), measured: w / one, ok: true, limit: 0.40})
		}
		if n, ok := res.shardLabeled(k, mode); ok {
			limit := 1.0
			if mode == "server" {
				limit = 0
			}
			ts = append(ts, target{what: fmt.Sprintf("objects labeled per object, mode %s", mode), measured: float64(n) / float64(res.Cfg.ShardN), ok: true, limit: limit})
		}
	}
	return ts
}

func (res *results) targetTable() string {
	var b strings.Builder
	b.WriteString("| target | measured | limit | result |\n|---|--:|--:|---|\n")
	for _, t := range res.targets() {
		m, verdict := "-", "not measured"
		if t.ok {
			m, verdict = fmt.Sprintf("%.3fx", t.measured), "met"
			if t.measured > t.limit {
				verdict = "**missed**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | <= %.2fx | %s |\n", t.what, m, t.limit, verdict)
	}
	return b.String()
}

// save writes the results as JSON, for -render.
func (res *results) save(path string) error {
	data, err := json.MarshalIndent(res, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// rerender renders the section from the results an earlier run saved, and
// with write writes it and the charts into the repository at repo.
func rerender(path, repo string, write bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if repo, err = filepath.Abs(repo); err != nil {
		return err
	}
	res.Cfg.Repo = repo
	md := res.document()
	fmt.Println(md)
	if !write {
		return nil
	}
	if err := res.writeCharts(filepath.Join(repo, res.Cfg.Charts)); err != nil {
		return err
	}
	return benchdoc.WriteSection(filepath.Join(repo, "BENCHMARKS.md"), "scale", md)
}
