package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/bench/internal/blackhole"
)

// The scenario "stop": the writes stop at the last fault, so nothing written
// later rescues a source whose reconcile failed during the outage and waits
// in the controller's retry backoff. The controller reaches the API server
// through the proxy of package blackhole. At the last fault the proxy mutes
// the controller (its requests stop reaching the API server, while its watch
// still gets events), every source is written once more, and once the
// controller has seen those changes the API server is killed: every
// reconcile fails, the ones in flight included. Measured: how long after
// the API server is ready again each source's mirror matches the source.
//
// Why not pause the controller (SIGSTOP) while the sources are written
// instead: a paused controller's watch events wait in socket buffers, and
// the first thing the resumed controller sends on the connection of the
// killed API server draws a TCP reset, which discards the events not yet
// delivered. A smoke run lost most of them that way, and the controller
// then got them again after the restart, with no failure to retry.

// settle is how long the driver waits after the last writes before it kills
// the API server, for their watch events to reach the controller.
const settle = time.Second

// stopResult is one run of one implementation through the scenario "stop".
type stopResult struct {
	impl    string
	rep     int
	initial float64     // seconds from the controller's start to every source mirrored
	writes  writeCounts // the random writes before the last fault
	// touched is how many sources the last pass wrote, touchFailed how
	// many of its writes failed.
	touched, touchFailed int
	// mirroredAtKill is how many sources' mirrors matched them just before
	// the kill: 0 if every source had a change the controller had not
	// mirrored, as the scenario means.
	mirroredAtKill int
	down           float64 // seconds from the kill to the API server ready
	// pendingAtReady is how many sources' mirrors did not match them at
	// the first list after the API server was ready.
	pendingAtReady int
	// perObject holds, sorted, the seconds from the API server ready to
	// each source's mirror first matching it.
	perObject []float64
	outcome   string // "" if converged, else what happened
	logStats
	log string
}

func (r stopResult) converged() bool { return r.outcome == "" }

// quantile returns the q-quantile of the per-object seconds (nearest rank).
func (r stopResult) quantile(q float64) float64 {
	if len(r.perObject) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(r.perObject)))) - 1
	return r.perObject[min(max(i, 0), len(r.perObject)-1)]
}

// lastObject returns the seconds from the API server ready to the last
// source mirrored, +Inf if the run did not converge.
func (r stopResult) lastObject() float64 {
	if !r.converged() || len(r.perObject) == 0 {
		return math.Inf(1)
	}
	return r.perObject[len(r.perObject)-1]
}

func (r stopResult) summary() string {
	s := fmt.Sprintf("initial mirroring %.1fs; %d writes acknowledged, %d refused, %d failed before the last fault; last pass wrote %d sources (%d failed); %d mirrored at the kill; API server down %.1fs; %d sources pending when it was ready; in the log (%s): %d watch 410s, %d relists",
		r.initial, r.writes.Acked, r.writes.Refused, r.writes.Failed, r.touched, r.touchFailed, r.mirroredAtKill, r.down, r.pendingAtReady, r.log, r.gone, r.relists)
	if !r.converged() {
		return r.outcome + "; " + s
	}
	return fmt.Sprintf("last object %.1fs after the API server was ready, per object p50 %.1fs, p99 %.1fs; %s",
		r.lastObject(), r.quantile(0.5), r.quantile(0.99), s)
}

func (r *runner) runStop(ctx context.Context) (stopResult, error) {
	rr := stopResult{impl: r.impl, rep: r.rep, log: r.logPath("stop")}
	target, err := apiserverAddr(r.kubeconfig)
	if err != nil {
		return rr, err
	}
	proxy, err := blackhole.Start(target)
	if err != nil {
		return rr, err
	}
	defer proxy.Close()
	kubeconfig := rr.log + ".kubeconfig"
	if err := writeKubeconfig(r.kubeconfig, kubeconfig, proxy.Addr()); err != nil {
		return rr, err
	}
	if rr.initial, err = r.begin(ctx, kubeconfig, rr.log); err != nil {
		return rr, err
	}
	defer r.ctl.stop()

	t0 := time.Now()
	note := func(what string) { logf("    %6.2fs %s", time.Since(t0).Seconds(), what) }
	w := startWriters(r.cs, r.cfg)
	if err := sleepUntil(ctx, t0.Add(r.cfg.stopWrites)); err != nil {
		w.stop()
		return rr, err
	}
	proxy.Mute()
	note("controller muted")
	rr.writes = w.stop()
	note("random writes stopped")
	rr.touched, rr.touchFailed = r.touchAll(ctx)
	note(fmt.Sprintf("every source written once more (%d failed)", rr.touchFailed))
	if err := sleepUntil(ctx, time.Now().Add(settle)); err != nil {
		return rr, err
	}
	s, err := r.check(ctx)
	if err != nil {
		return rr, err
	}
	rr.mirroredAtKill = s.sources - s.missing - s.stale
	note("kill API server")
	killed := time.Now()
	if err := r.cp.StopAPIServer(); err != nil {
		return rr, err
	}
	// New connections now find no API server behind the proxy.
	proxy.Unmute()
	if err := sleepUntil(ctx, killed.Add(r.cfg.down)); err != nil {
		return rr, err
	}
	note("start API server")
	if err := r.cp.StartAPIServer(); err != nil {
		return rr, err
	}
	ready := time.Now()
	note("API server ready")
	rr.down = ready.Sub(killed).Seconds()

	tr, err := startTracker(ctx, r.watchCS, r.cfg.namespace)
	if err != nil {
		return rr, fmt.Errorf("following the mirrors: %w", err)
	}
	rr.pendingAtReady = tr.pending()
	deadline := ready.Add(r.cfg.timeout)
	err = r.waitMirrored(ctx, tr, deadline)
	if err == nil {
		// The tracker saw every source mirrored; check it on the server,
		// the way the scenario "faults" does.
		_, _, err = r.waitConverged(ctx, deadline)
	}
	sources, werr := tr.stop()
	switch {
	case errors.Is(err, errNotConverged):
		rr.outcome = fmt.Sprintf("did not converge within %s after the API server was ready (%d sources pending)", r.cfg.timeout, tr.pending())
	case errors.Is(err, errExited):
		rr.outcome = fmt.Sprintf("controller exited (%v) before converging", r.ctl.err)
	case err != nil:
		return rr, err
	case werr != nil:
		return rr, fmt.Errorf("following the mirrors: %w", werr)
	}
	for _, h := range sources {
		if last := h.states[len(h.states)-1]; !last.mirrored.IsZero() {
			rr.perObject = append(rr.perObject, last.mirrored.Sub(ready).Seconds())
		}
	}
	slices.Sort(rr.perObject)
	r.ctl.stop()
	rr.logStats = readLog(rr.log)
	return rr, nil
}

// waitMirrored waits until the tracker has seen every source's current
// state mirrored.
func (r *runner) waitMirrored(ctx context.Context, tr *tracker, deadline time.Time) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for tr.pending() > 0 {
		if time.Now().After(deadline) {
			return errNotConverged
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.ctl.exited:
			return errExited
		case <-tick.C:
		}
	}
	return nil
}

// touchAll gives every source a new value, creating those that the writers
// deleted, and returns how many it wrote and how many writes failed.
func (r *runner) touchAll(ctx context.Context) (touched, failed int) {
	cms := r.cs.CoreV1().ConfigMaps(r.cfg.namespace)
	var (
		next       atomic.Int64
		nOK, nFail atomic.Int64
		wg         sync.WaitGroup
	)
	for range r.cfg.writers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < r.cfg.objects; i = int(next.Add(1)) - 1 {
				// A value no writer used: they write sequence numbers.
				v := "last-" + strconv.Itoa(i)
				patch := `{"data":{"v":"` + v + `"}}`
				_, err := cms.Patch(ctx, sourceName(i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if apierrors.IsNotFound(err) {
					_, err = cms.Create(ctx, source(r.cfg.namespace, i, v), metav1.CreateOptions{})
				}
				if err != nil {
					nFail.Add(1)
				} else {
					nOK.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(nOK.Load()), int(nFail.Load())
}

// stopTarget is issue 11's goal: ctrl mirrors the last source within this
// long after the API server is ready, in every run.
const stopTarget = 10 * time.Second

func (res *results) stopsOf(impl string) []stopResult {
	var rs []stopResult
	for _, r := range res.stops {
		if r.impl == impl {
			rs = append(rs, r)
		}
	}
	return rs
}

// perRun formats f of each run, where +Inf is a run that did not converge.
func perRun[R any](rs []R, f func(R) float64) string {
	var each []string
	for _, r := range rs {
		if v := f(r); math.IsInf(v, 1) {
			each = append(each, "did not converge")
		} else {
			each = append(each, fmt.Sprintf("%.1f", v))
		}
	}
	return strings.Join(each, ", ")
}

func (res *results) stopTable() string {
	var b strings.Builder
	b.WriteString("| implementation | last object s after the API server was ready, each run | median | max | per object p50 s, each run | per object p99 s, each run | sources pending at ready, each run | relists, each run |\n")
	b.WriteString("|---|---|--:|--:|---|---|---|---|\n")
	for _, impl := range res.cfg.impls {
		rs := res.stopsOf(impl)
		var lasts []float64
		var pending, relists []string
		for _, r := range rs {
			lasts = append(lasts, r.lastObject())
			pending = append(pending, strconv.Itoa(r.pendingAtReady))
			relists = append(relists, strconv.Itoa(r.relists))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", impl,
			perRun(rs, stopResult.lastObject), stat(slices.Clone(lasts), true), stat(lasts, false),
			perRun(rs, func(r stopResult) float64 { return r.quantile(0.5) }),
			perRun(rs, func(r stopResult) float64 { return r.quantile(0.99) }),
			strings.Join(pending, ", "), strings.Join(relists, ", "))
	}
	return b.String()
}

// stopTarget checks ctrl against issue 11's goal.
func (res *results) stopTarget() string {
	rs := res.stopsOf("ctrl")
	verdict, measured := "not measured", "-"
	if len(rs) > 0 {
		var lasts []float64
		verdict = "met"
		for _, r := range rs {
			lasts = append(lasts, r.lastObject())
			if r.lastObject() > stopTarget.Seconds() {
				verdict = "**missed**"
			}
		}
		measured = stat(lasts, false)
	}
	return "| target for ctrl | measured (worst run) | limit | result |\n|---|--:|--:|---|\n" +
		fmt.Sprintf("| last source mirrored after the API server was ready, in every run | %s s | <= %.0f s | %s |\n", measured, stopTarget.Seconds(), verdict)
}

func (res *results) stopRunTable() string {
	var b strings.Builder
	b.WriteString("| rep | implementation | initial mirroring s | random writes acknowledged / refused / failed | last pass written / failed | mirrored at the kill | API server down s | pending at ready | last object s | p50 s | p99 s | watch 410s | relists |\n")
	b.WriteString("|--:|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range res.stops {
		last := "did not converge"
		if r.converged() {
			last = fmt.Sprintf("%.1f", r.lastObject())
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %d / %d / %d | %d / %d | %d | %.1f | %d | %s | %.1f | %.1f | %d | %d |\n",
			r.rep, r.impl, r.initial, r.writes.Acked, r.writes.Refused, r.writes.Failed, r.touched, r.touchFailed,
			r.mirroredAtKill, r.down, r.pendingAtReady, last, r.quantile(0.5), r.quantile(0.99), r.gone, r.relists)
	}
	return b.String()
}

// stopDocument is the subsection of the scenario stop.
func (res *results) stopDocument() string {
	c := res.cfg
	var b strings.Builder
	b.WriteString("### Writes stop at the last fault\n\n")
	b.WriteString("The controller reaches the API server through a loopback TCP proxy (`bench/internal/blackhole`); TLS passes through.\n")
	fmt.Fprintf(&b, "%d source ConfigMaps. For %s the writers change them at %d writes per second. Then the last fault, which is also the\n",
		c.objects, secs(c.stopWrites), c.rate)
	b.WriteString("end of the writes: the proxy mutes the controller (what it sends no longer reaches the API server, while what the API\n")
	b.WriteString("server sends, its watch events, still reaches it), the writers stop, every source is written once more (a new value, or\n")
	fmt.Fprintf(&b, "created again if a writer had deleted it), and %s later, once the controller has seen those changes and none of its\n", secs(settle))
	b.WriteString("writes has landed (column \"mirrored at the kill\", from a list just before: 0), the API server is killed (SIGKILL): the\n")
	fmt.Fprintf(&b, "controller's requests in flight fail, and so does every reconcile while the API server is down. %s after the kill it\n", secs(c.down))
	b.WriteString("is restarted and waited for until `/readyz` answers. Nothing is written after that, so a source whose reconcile failed\n")
	b.WriteString("is mirrored only when the controller retries it. client-go's default controller limiter\n")
	b.WriteString("(`DefaultTypedControllerRateLimiter`, which ctrl and raw use) books every retry in a token bucket of 10 per second, so\n")
	b.WriteString("after an outage that failed N keys the last retry comes about N/10 s later. controller-runtime v0.25.2's default\n")
	b.WriteString("priority queue has no bucket: its limiter is per key only, 5 ms doubling with every failure. While the API server is\n")
	b.WriteString("down the proxy accepts connections and closes those it cannot forward, so the controller sees end of file or a reset\n")
	b.WriteString("where it would see connection refused: a reconcile fails and is retried alike, while client-go retries a list or\n")
	b.WriteString("watch that ends in end of file after 1 s instead of its reflector's backoff.\n\n")
	b.WriteString("Why not pause the controller (SIGSTOP) while the sources are written: the events of a paused controller's watch wait\n")
	b.WriteString("in socket buffers, and the first thing the resumed controller sends on the connection of the killed API server draws a\n")
	b.WriteString("TCP reset, which discards what was not delivered yet; in a trial run the controller got most of the changes only after\n")
	b.WriteString("the restart, with nothing to retry.\n\n")
	b.WriteString("ConfigMap watches are served from etcd, compacted every 5 minutes (the default), so the controller's watch resumes\n")
	b.WriteString("where it stopped: a restarted API server's watch cache would start at the current revision, the watch would get 410\n")
	b.WriteString("Gone, and the relist would hand the controller every source again, hiding the retries. The column \"relists\" counts\n")
	b.WriteString("the controller's relists.\n\n")
	b.WriteString("Per-object convergence: once the API server is ready, the driver lists the namespace and watches it from there (one\n")
	b.WriteString("watch, straight to the API server); a source has converged when an event first shows its mirror with the source's\n")
	b.WriteString("final data. Times are when the driver received the event, so the resolution is the watch's delivery, milliseconds;\n")
	b.WriteString("a mirror that already matched at the first list counts at the time of that list. \"Sources pending at ready\" is how\n")
	b.WriteString("many mirrors did not match at that list; the others were mirrored while the restarted API server already served\n")
	b.WriteString("requests but did not answer `/readyz` yet. The run ends when every mirror matches, checked by polling as in the\n")
	fmt.Fprintf(&b, "scenario faults; after %s a run is reported as not converged.\n\n", secs(c.timeout))
	fmt.Fprintf(&b, "Target (issue 11): ctrl mirrors the last source within %.0f s after the API server is ready, in every run.\n\n", stopTarget.Seconds())
	b.WriteString(res.stopTable())
	b.WriteString("\n")
	b.WriteString(res.stopTarget())
	b.WriteString("\n")
	b.WriteString("Every run (the last pass: sources written once more while the controller was muted, and writes of it that failed):\n\n")
	b.WriteString(res.stopRunTable())
	b.WriteString("\n")
	return b.String()
}
