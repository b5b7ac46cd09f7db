package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

// runResult is one run of one implementation with one variant.
type runResult struct {
	impl    string
	variant shapes.Variant
	rep     int
	report  shapes.Report

	// lags are fast's lag for each write, in ms: from the return of the
	// write's patch to fast's first reconcile of the object at that write
	// or a later one. Negative when fast saw the event before the writer
	// saw the response.
	lags          []float64
	p50, p99, max float64
	// skipped counts writes fast first saw through a later one, because it
	// had not reconciled the object before the next write to it.
	skipped int
	// fastCaughtUp, slowCaughtUp: seconds from the last patch's return to
	// the controller having reconciled every object at its last write.
	fastCaughtUp, slowCaughtUp float64
	writeRate                  float64 // patches per second, first sent to last returned
}

// measure joins the driver's writes with fast's sightings.
func measure(rr runResult, writes []write, rep shapes.Report) (runResult, error) {
	rr.report = rep
	var first, last int64 = math.MaxInt64, 0
	for _, w := range writes {
		first, last = min(first, w.sent), max(last, w.returned)
		if w.obj >= len(rep.Sightings) {
			return rr, fmt.Errorf("report has sightings of %d objects, want %d", len(rep.Sightings), len(writes))
		}
		i, ok := slices.BinarySearchFunc(rep.Sightings[w.obj], w.seq, func(s shapes.Sighting, seq int64) int { return int(s.Seq - seq) })
		if i == len(rep.Sightings[w.obj]) {
			return rr, fmt.Errorf("fast never reconciled %s at write %d or later", shapes.ObjectName(w.obj), w.seq)
		}
		if !ok {
			rr.skipped++
		}
		rr.lags = append(rr.lags, float64(rep.Sightings[w.obj][i].At-w.returned)/1e6)
	}
	sorted := slices.Sorted(slices.Values(rr.lags))
	rr.p50, rr.p99, rr.max = percentile(sorted, 0.50), percentile(sorted, 0.99), sorted[len(sorted)-1]
	rr.fastCaughtUp = float64(rep.FastCaughtUp-last) / 1e9
	rr.slowCaughtUp = float64(rep.SlowCaughtUp-last) / 1e9
	rr.writeRate = float64(len(writes)) / (float64(last-first) / 1e9)
	return rr, nil
}

// percentile returns the nearest-rank q-quantile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r runResult) cpu() float64 { return r.report.UserSeconds + r.report.SysSeconds }

func (r runResult) summary() string {
	return fmt.Sprintf("fast lag p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d writes seen only later); slow %d reconciles, caught up %.2fs after the last write; CPU %.2fs; %.0f patches/s",
		r.p50, r.p99, r.max, r.skipped, r.report.SlowReconciles, r.slowCaughtUp, r.cpu(), r.writeRate)
}

// results are everything one invocation measured.
type results struct {
	cfg  config
	run  *benchdoc.Run
	runs []runResult
}

// metric reads one figure of a run.
type metric func(runResult) float64

var (
	mP50        metric = func(r runResult) float64 { return r.p50 }
	mP99        metric = func(r runResult) float64 { return r.p99 }
	mMax        metric = func(r runResult) float64 { return r.max }
	mSlowRecs   metric = func(r runResult) float64 { return float64(r.report.SlowReconciles) }
	mSlowCaught metric = func(r runResult) float64 { return r.slowCaughtUp }
	mCPU        metric = runResult.cpu
)

func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}

// find returns the run of impl with variant v in repetition rep.
func (res *results) find(impl string, v shapes.Variant, rep int) (runResult, bool) {
	for _, r := range res.runs {
		if r.impl == impl && r.variant == v && r.rep == rep {
			return r, true
		}
	}
	return runResult{}, false
}

// median returns the median of m over impl's runs of v.
func (res *results) median(impl string, v shapes.Variant, m metric) (float64, bool) {
	var vs []float64
	for _, r := range res.runs {
		if r.impl == impl && r.variant == v {
			vs = append(vs, m(r))
		}
	}
	return median(vs)
}

// ratio returns the median over the repetitions of impl's m over base's in
// the same repetition.
func (res *results) ratio(impl, base string, v shapes.Variant, m metric) (float64, bool) {
	var vs []float64
	for rep := 1; rep <= res.cfg.r; rep++ {
		a, okA := res.find(impl, v, rep)
		b, okB := res.find(base, v, rep)
		if okA && okB && m(b) > 0 {
			vs = append(vs, m(a)/m(b))
		}
	}
	return median(vs)
}

func (res *results) ratioCell(impl, base string, v shapes.Variant, m metric) string {
	if impl == base {
		return "-"
	}
	r, ok := res.ratio(impl, base, v, m)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

func (res *results) has(impl string) bool { return slices.Contains(res.cfg.impls, impl) }

// table is the medians per variant and implementation.
func (res *results) table() string {
	var b strings.Builder
	b.WriteString("| slow's reconcile | implementation | fast: lag p50 ms | p99 ms | max ms | slow's reconciles | slow caught up s | CPU s | p99 vs raw | slow's reconciles vs raw | CPU vs raw |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, v := range res.cfg.variants {
		for _, impl := range res.cfg.impls {
			cell := func(m metric, format string) string {
				x, ok := res.median(impl, v, m)
				if !ok {
					return "-"
				}
				return fmt.Sprintf(format, x)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.Describe(), impl,
				cell(mP50, "%.1f"), cell(mP99, "%.1f"), cell(mMax, "%.1f"), cell(mSlowRecs, "%.0f"), cell(mSlowCaught, "%.2f"), cell(mCPU, "%.2f"),
				res.ratioCell(impl, "raw", v, mP99), res.ratioCell(impl, "raw", v, mSlowRecs), res.ratioCell(impl, "raw", v, mCPU))
		}
	}
	return b.String()
}

// Limits of the targets, from issue 55's proof.
const (
	lagRatioLimit = 2.0  // ctrl's fast p99 lag over raw's in the same run...
	lagFloorMs    = 10.0 // ... or at most this
	recsLimit     = 1.10 // ctrl's slow reconciles over controller-runtime's
)

// targets checks ctrl against its goals for every variant with a slow
// reconcile.
func (res *results) targets() string {
	var b strings.Builder
	b.WriteString("| target for ctrl | measured | limit | result |\n|---|--:|--:|---|\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	for _, v := range res.cfg.variants {
		if v.Shape.Kind == "none" {
			continue
		}
		if res.has("ctrl") && res.has("raw") {
			r, okR := res.ratio("ctrl", "raw", v, mP99)
			p99, okP := res.median("ctrl", v, mP99)
			if okR && okP {
				fmt.Fprintf(&b, "| fast's p99 lag vs raw, slow's reconcile %s | %.2fx (%.1f ms) | <= %.2fx or <= %.0f ms | %s |\n",
					v.Describe(), r, p99, lagRatioLimit, lagFloorMs, verdict(r <= lagRatioLimit || p99 <= lagFloorMs))
			}
		}
		if res.has("ctrl") && res.has("cr") {
			if r, ok := res.ratio("ctrl", "cr", v, mSlowRecs); ok {
				fmt.Fprintf(&b, "| slow's reconciles vs cr, slow's reconcile %s | %.3fx | <= %.2fx | %s |\n", v.Describe(), r, recsLimit, verdict(r <= recsLimit))
			}
		}
	}
	return b.String()
}

func (res *results) runTable() string {
	var b strings.Builder
	b.WriteString("| rep | slow's reconcile | implementation | fast: lag p50 ms | p99 ms | max ms | writes seen only later | fast's reconciles | slow's reconciles | fast caught up s | slow caught up s | CPU user+sys s | patches/s |\n")
	b.WriteString("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range res.runs {
		p := r.report
		fmt.Fprintf(&b, "| %d | %s | %s | %.1f | %.1f | %.1f | %d | %d | %d | %.2f | %.2f | %.2f + %.2f | %.0f |\n",
			r.rep, r.variant.Describe(), r.impl, r.p50, r.p99, r.max, r.skipped, p.FastReconciles, p.SlowReconciles,
			r.fastCaughtUp, r.slowCaughtUp, p.UserSeconds, p.SysSeconds, r.writeRate)
	}
	return b.String()
}

// document is the shapes section of BENCHMARKS.md.
func (res *results) document() string {
	c := res.cfg
	var b strings.Builder
	b.WriteString("## Time to a reconcile beside a slow controller\n\n")
	if c.note != "" {
		fmt.Fprintf(&b, "**%s**\n\n", c.note)
	}
	b.WriteString("ctrl against controller-runtime v0.25.2 and hand-written client-go, each as its own process running two controllers\n")
	b.WriteString("of ConfigMaps on one cache (one informer) against a real kube-apiserver and etcd on loopback: `slow`, whose reconcile\n")
	b.WriteString("spends a fixed time on work that sends no request to the API server (a wait on a timer, as for a call to a cloud API,\n")
	b.WriteString("a database or DNS; or a busy loop, as for a template render), and `fast`, which records when it first reconciles each\n")
	b.WriteString("write. Time to a reconcile is fast's lag; what slow does to it is what this measures. Written by `bench/cmd/shapes\n")
	b.WriteString("-write` (`make bench-shapes`); the controllers are [bench/cmd/shapes-ctrl](bench/cmd/shapes-ctrl/main.go),\n")
	b.WriteString("[shapes-cr](bench/cmd/shapes-cr/main.go) and [shapes-raw](bench/cmd/shapes-raw/main.go), the shapes and the protocol\n")
	b.WriteString("[bench/internal/shapes](bench/internal/shapes/shapes.go).\n\n")

	b.WriteString("### Setup\n\n")
	b.WriteString(res.run.Setup("the benchmark's own processes count in the figures after; on 2 noisy cores, lags of a few ms are noise",
		"go run ./cmd/shapes "+shellJoin(os.Args[1:])))
	fmt.Fprintf(&b, "- N = %d ConfigMaps of %d bytes of data in one namespace; each run the driver patches every object %d times, in order, at %g patches/s\n",
		c.n, dataBytes, c.rounds, c.rate)
	b.WriteString("  (a fixed schedule; each patch a merge patch of one annotation, the write's sequence number, so one watch event)\n")
	fmt.Fprintf(&b, "- R = %d repetitions; implementations ran interleaved (for each repetition, each variant: %s), medians of the R runs are shown\n",
		c.r, strings.Join(c.impls, ", "))
	fmt.Fprintf(&b, "- the busy loop: %d iterations per ms of CPU, measured by the driver on its own thread's CPU time and handed to every process\n\n", c.spinPerMs)

	b.WriteString("| implementation | what it is |\n|---|---|\n")
	b.WriteString("| ctrl | `ctrl.NewManager(Options{Config, Namespace})`, two `ctrl.NewController` for `*corev1.ConfigMap` with `ControllerOptions{Workers}` and defaults otherwise, on the manager's one cache of the type |\n")
	b.WriteString("| cr | controller-runtime manager with its cache restricted to the namespace, two `builder.ControllerManagedBy(mgr).Named(..).For(&corev1.ConfigMap{})` with `MaxConcurrentReconciles: Workers` on its one informer; reconcile does `client.Get` from the cache |\n")
	b.WriteString("| raw | client-go shared informer factory for the namespace; its one ConfigMap informer feeds two typed rate-limited work queues (`DefaultTypedControllerRateLimiter`), each with its workers and a lister `Get` |\n\n")
	b.WriteString("Variants: slow's reconcile waits on a timer (`time.Sleep`) or runs a busy loop, on every reconcile of an object written in the\n")
	b.WriteString("run (its first reconcile of each object, at start-up, returns at once); `Workers` is that of both controllers, 1 unless said.\n")
	b.WriteString("Every process has the same client limits (QPS 20, burst 30); the reconciles write nothing.\n\n")

	b.WriteString("### Results\n\n")
	b.WriteString(res.table())
	b.WriteString("\n")
	b.WriteString("- fast's lag: for each write, from the return of the driver's patch to fast's first reconcile of the object at that\n")
	b.WriteString("  write or a later one, both read from the wall clock of the one machine (Unix nanoseconds; the controller reports its\n")
	b.WriteString("  times over the protocol). Negative when fast reconciled before the driver had read the response. p50, p99 and max\n")
	fmt.Fprintf(&b, "  over the run's %d writes (nearest rank), then the median over the runs.\n", c.n*c.rounds)
	b.WriteString("- slow's reconciles: from the first write until both controllers had reconciled every object at its last write (those\n")
	fmt.Fprintf(&b, "  under way then included); at most %d, one per write; fewer means writes were coalesced in the queue. The first\n", c.n*c.rounds)
	b.WriteString("  reconciles at start-up are not counted.\n")
	b.WriteString("- slow caught up: seconds from the return of the last patch until slow had reconciled every object at its last write.\n")
	b.WriteString("- CPU: user+sys CPU seconds of the process (`getrusage(RUSAGE_SELF)`) from the first write until both had caught up,\n")
	b.WriteString("  busy loops included.\n")
	b.WriteString("- vs raw: the median over the repetitions of the ratio to raw's figure in the same repetition.\n\n")

	b.WriteString("### Targets\n\n")
	b.WriteString("From issue 55: for every slow reconcile, fast's p99 lag within 2x raw client-go's in the same run or under 10 ms, and\n")
	b.WriteString("slow's reconciles within 1.1x controller-runtime's (ratios are medians over the repetitions of same-repetition ratios;\n")
	b.WriteString("the lag in parentheses is ctrl's median p99).\n\n")
	b.WriteString(res.targets())
	b.WriteString("\n### Every run\n\n")
	b.WriteString(res.runTable())
	b.WriteString("\nwrites seen only later: writes fast first reconciled at a later write to the same object, because it had not reconciled\n")
	b.WriteString("the object before the next write to it came. fast caught up: as slow caught up, for fast.\n")
	return b.String()
}

// shellJoin joins args into a command line that a shell splits back into
// args, quoting those with spaces or characters special to it.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\*?[#~&;|<>(){}!") {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
