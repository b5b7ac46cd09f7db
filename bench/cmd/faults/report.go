package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
)

// target is the goal: ctrl converges within this long after the
// last fault, in every run.
const target = 15 * time.Second

// results are everything one invocation measured.
type results struct {
	cfg   config
	plan  []fault
	run   *benchdoc.Run
	runs  []runResult  // scenario faults
	stops []stopResult // scenario stop
	holes []holeResult // scenario blackhole
}

// ran reports whether the invocation ran the scenario.
func (res *results) ran(scenario string) bool { return slices.Contains(res.cfg.scenarios, scenario) }

// tables are the results of every scenario run, for the terminal.
func (res *results) tables() string {
	var b strings.Builder
	if res.ran("faults") {
		b.WriteString("faults:\n\n" + res.table() + "\n" + res.target() + "\n" + res.runTable() + "\n")
	}
	if res.ran("stop") {
		b.WriteString("stop:\n\n" + res.stopTable() + "\n" + res.stopTarget() + "\n" + res.stopRunTable() + "\n")
	}
	if res.ran("blackhole") {
		b.WriteString("blackhole:\n\n" + res.holeTable() + "\n" + res.holeTarget() + "\n" + res.holeRunTable() + "\n")
	}
	return b.String()
}

func (res *results) runsOf(impl string) []runResult {
	var rs []runResult
	for _, r := range res.runs {
		if r.impl == impl {
			rs = append(rs, r)
		}
	}
	return rs
}

// seconds formats a run's seconds after the last fault.
func seconds(r runResult) string {
	if !r.converged() {
		return "did not converge"
	}
	return fmt.Sprintf("%.1f", r.after)
}

// stat formats the median or maximum of vs, where +Inf is a run that did not
// converge.
func stat(vs []float64, median bool) string {
	if len(vs) == 0 {
		return "-"
	}
	slices.Sort(vs)
	v := vs[len(vs)-1]
	if median {
		v = vs[len(vs)/2]
		if len(vs)%2 == 0 {
			v = (vs[len(vs)/2-1] + v) / 2
		}
	}
	if math.IsInf(v, 1) {
		return "did not converge"
	}
	return fmt.Sprintf("%.1f", v)
}

// afterFault returns each run's seconds after the last fault, +Inf for a run
// that did not converge.
func afterFault(rs []runResult) []float64 {
	var vs []float64
	for _, r := range rs {
		if r.converged() {
			vs = append(vs, r.after)
		} else {
			vs = append(vs, math.Inf(1))
		}
	}
	return vs
}

func (res *results) table() string {
	var b strings.Builder
	b.WriteString("| implementation | s after the last fault, each run | median | max | s after the writes stopped, median | last 410 Gone to relist s, per run | writes acknowledged / refused / failed, per run |\n")
	b.WriteString("|---|---|--:|--:|--:|---|---|\n")
	for _, impl := range res.cfg.impls {
		rs := res.runsOf(impl)
		var each, delays, writes []string
		var afterEnd []float64
		for _, r := range rs {
			each = append(each, seconds(r))
			writes = append(writes, fmt.Sprintf("%d / %d / %d", r.writes.Acked, r.writes.Refused, r.writes.Failed))
			delays = append(delays, r.delay())
			if r.converged() {
				afterEnd = append(afterEnd, r.afterEnd)
			} else {
				afterEnd = append(afterEnd, math.Inf(1))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", impl, strings.Join(each, ", "),
			stat(afterFault(rs), true), stat(afterFault(rs), false), stat(afterEnd, true),
			strings.Join(delays, ", "), strings.Join(writes, "; "))
	}
	return b.String()
}

// target checks ctrl against the goal.
func (res *results) target() string {
	rs := res.runsOf("ctrl")
	verdict, measured := "not measured", "-"
	if len(rs) > 0 {
		measured = stat(afterFault(rs), false)
		verdict = "met"
		for _, r := range rs {
			if !r.converged() || r.after > target.Seconds() {
				verdict = "**missed**"
			}
		}
	}
	return "| target for ctrl | measured (worst run) | limit | result |\n|---|--:|--:|---|\n" +
		fmt.Sprintf("| converged after the last fault, in every run | %s s | <= %.0f s | %s |\n", measured, target.Seconds(), verdict)
}

func (res *results) runTable() string {
	var b strings.Builder
	b.WriteString("| rep | implementation | initial mirroring s | last fault ended at s | pause across the restart s | s after the last fault | s after the writes stopped | last 410 Gone to relist s | watch 410s | relists | acknowledged | refused | failed |\n")
	b.WriteString("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range res.runs {
		afterEnd := "-"
		if r.converged() {
			afterEnd = fmt.Sprintf("%.1f", r.afterEnd)
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %.1f | %s | %s | %s | %d | %d | %d | %d | %d |\n",
			r.rep, r.impl, r.initial, r.lastEnd, r.overlap, seconds(r), afterEnd, r.delay(), r.gone, r.relists,
			r.writes.Acked, r.writes.Refused, r.writes.Failed)
	}
	return b.String()
}

// document is the faults section of BENCHMARKS.md.
func (res *results) document() string {
	c := res.cfg
	var b strings.Builder
	b.WriteString("## Recovery after control-plane faults\n\n")
	b.WriteString("How long a controller takes to catch up once the control plane stops failing under it: ctrl, controller-runtime\n")
	b.WriteString("v0.25.2 and hand-written client-go, each as its own process running the same mirror controller, against a real\n")
	b.WriteString("kube-apiserver and etcd on loopback. Scenarios, each on a control plane of its own:\n\n")
	if res.ran("faults") {
		b.WriteString("- [faults during writes](#faults-during-writes): the API server is killed and the controller paused while writers change\n")
		b.WriteString("  the sources, and compaction makes a paused watch come back to 410 Gone;\n")
	}
	if res.ran("stop") {
		b.WriteString("- [writes stop at the last fault](#writes-stop-at-the-last-fault): every reconcile fails during an outage, and no\n")
		b.WriteString("  later write rescues a key waiting in the controller's retry backoff;\n")
	}
	if res.ran("blackhole") {
		b.WriteString("- [silent blackhole](#silent-blackhole): every connection the controller has open goes silently dead, while new\n")
		b.WriteString("  connections work and the writes go on.\n")
	}
	b.WriteString("\nWritten by `bench/cmd/faults -write`; `bench/run-faults.sh` runs it.\n\n")

	b.WriteString("### Setup\n\n")
	b.WriteString(res.run.Setup("the control plane, the controller and the writers share the machine, and their own load counts in the figures after",
		"go run ./cmd/faults "+strings.Join(os.Args[1:], " ")))
	for _, sc := range c.scenarios {
		flags := "none"
		if f := c.flagsFor(sc); len(f) > 0 {
			flags = "`" + strings.Join(f, " ") + "`"
		}
		fmt.Fprintf(&b, "- kube-apiserver flags added for the scenario %s: %s\n", sc, flags)
	}
	fmt.Fprintf(&b, "- in each scenario the implementations ran interleaved (%s, then again), R = %d runs each; every run starts from the same state: the namespace emptied, %d sources created afresh, the controller started and waited for until every source is mirrored\n",
		strings.Join(c.impls, ", "), c.reps, c.objects)
	fmt.Fprintf(&b, "- the writers: %d of them share %d writes per second to random sources, 90%% merge patches of the data, 5%% deletions and\n", c.writers, c.rate)
	b.WriteString("  5% creations, each with a new value; they talk to the API server directly\n\n")

	b.WriteString("The controller: for every ConfigMap labeled `role=src` in the namespace, keep a ConfigMap `dst-<name>` with the same `data`\n")
	b.WriteString("(server-side apply, forced), and delete `dst-<name>` once the source is gone. Same logic, 4 workers and the same client\n")
	b.WriteString("limits (QPS 1000, burst 2000) for all three; everything else, backoffs and rate limiters included, is each library's default.\n\n")
	b.WriteString("| implementation | what it is |\n|---|---|\n")
	for _, im := range impls {
		if slices.Contains(c.impls, im.name) {
			fmt.Fprintf(&b, "| %s | %s |\n", im.name, im.what)
		}
	}
	b.WriteString("\n")
	if res.ran("faults") {
		b.WriteString(res.faultsDocument())
	}
	if res.ran("stop") {
		b.WriteString(res.stopDocument())
	}
	if res.ran("blackhole") {
		b.WriteString(res.holeDocument())
	}
	fmt.Fprintf(&b, "The controllers' logs of the last invocation are in `%s`.\n", filepath.Join(c.work, "logs"))
	return b.String()
}

// faultsDocument is the subsection of the scenario faults.
func (res *results) faultsDocument() string {
	c := res.cfg
	var b strings.Builder
	b.WriteString("### Faults during writes\n\n")
	fmt.Fprintf(&b, "%d source ConfigMaps. For %s, the writers change them at %d writes per second. Meanwhile these faults, at fixed times\n",
		c.objects, secs(c.duration), c.rate)
	b.WriteString("after the start of the writes (each restarted API server is waited for until `/readyz` answers, which takes a few seconds):\n\n")
	for _, line := range describePlan(c, res.plan) {
		b.WriteString(line + "\n")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "etcd is compacted every %s and ConfigMap watches are served from etcd, not from the watch cache, so a watch that resumes\n", secs(c.compaction))
	b.WriteString("from a compacted revision gets 410 Gone.\n\n")
	b.WriteString("Why the pause across the restart waits for the compaction: a paused controller's socket and HTTP/2 window keep taking\n")
	b.WriteString("watch events until the connection is cut, so its watch position is the revision of the kill, and a restarted API server\n")
	b.WriteString("compacts first on its second compaction tick, to the revision of its first. Once a list at exactly the revision of the\n")
	b.WriteString("kill answers 410 Gone, the controller is resumed: it comes back to a watch position that is gone and must relist. This\n")
	fmt.Fprintf(&b, "takes about as long as the %s pause (column \"pause across the restart\" below). A plain pause with the connection intact\n", secs(c.pauseFor))
	b.WriteString("just resumes the stream.\n\n")
	b.WriteString("The writes stop at the end; then the driver lists the namespace every 200 ms until every source has a mirror with\n")
	fmt.Fprintf(&b, "equal data and no mirror lacks its source, and still so %s later: that is convergence, checked on the server, so\n", secs(stableFor))
	b.WriteString("nothing may be lost. The end of the last fault is when the controller was resumed with the API server ready; the writes\n")
	fmt.Fprintf(&b, "go on for a few seconds after it, so no run converges sooner than that. After %s without convergence a run is reported\n", secs(c.timeout))
	b.WriteString("as not converged.\n\n")
	fmt.Fprintf(&b, "Target: ctrl converges within %.0f s after the last fault, in every run.\n\n", target.Seconds())

	b.WriteString(res.table())
	b.WriteString("\n")
	b.WriteString(res.target())
	b.WriteString("\n")
	b.WriteString("- writes: acknowledged changed a source; refused were answered 404 or 409 (a patch or deletion of a deleted source, a creation\n")
	b.WriteString("  of an existing one); failed got no answer or another error, while the API server was down or starting.\n")
	b.WriteString("- from the controller's log (client-go's reflector lines at -v=4, ctrl's at its logger's verbosity 5): watch 410s are watches\n")
	b.WriteString("  that ended with 410 Gone (\"too old\"), relists the reflector's \"Listing and watching\" lines after the first, and last 410\n")
	b.WriteString("  Gone to relist the seconds from the last 410 to the next relist: how long the cache stayed blind after the last fault.\n\n")
	b.WriteString("Every run (times in seconds after the start of the writes, except where a column says otherwise):\n\n")
	b.WriteString(res.runTable())
	b.WriteString("\n")
	return b.String()
}

// secs formats d in seconds, as the tables do.
func secs(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }
