package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/controlplane"
	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

const (
	// pollInterval is how often the driver lists the namespace to see
	// whether the mirrors match the sources.
	pollInterval = 200 * time.Millisecond
	// stableFor is how long the mirrors must keep matching for the first
	// match to count as convergence.
	stableFor = 2 * time.Second
	// initialTimeout bounds the wait for a fresh controller to mirror every
	// source before the writes start.
	initialTimeout = 2 * time.Minute
)

// runner runs one implementation through a scenario once.
type runner struct {
	cfg        config
	cs         kubernetes.Interface // bounds every request: for the writers and the checks
	watchCS    kubernetes.Interface // no bound on requests: for the tracker's watch
	cp         *controlplane.ControlPlane
	kubeconfig string
	impl, bin  string
	rep        int
	ctl        *controller
}

// runResult is one run of one implementation.
type runResult struct {
	impl     string
	rep      int
	initial  float64 // seconds from the controller's start to every source mirrored
	events   []event
	lastEnd  float64 // when the last fault ended, seconds after the writes started
	written  float64 // when the writes stopped, seconds after they started
	overlap  float64 // how long the pause across the API server restart lasted; 0 if none
	writes   writeCounts
	outcome  string  // "" if converged, else what happened
	after    float64 // seconds from the end of the last fault to convergence
	afterEnd float64 // seconds from the end of the writes to convergence
	logStats
	log string
}

func (r runResult) converged() bool { return r.outcome == "" }

// delay formats the seconds from the last 410 Gone to the relist.
func (r runResult) delay() string {
	if r.relistDelay < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.relistDelay)
}

func (r runResult) summary() string {
	s := fmt.Sprintf("initial mirroring %.1fs; last fault ended at %.1fs, writes at %.1fs; %d writes acknowledged, %d refused (404/409), %d failed; in the log (%s): %d watch 410s, %d relists, the last 410 relisted after %s",
		r.initial, r.lastEnd, r.written, r.writes.Acked, r.writes.Refused, r.writes.Failed, r.log, r.gone, r.relists, r.delay())
	if !r.converged() {
		return r.outcome + "; " + s
	}
	return fmt.Sprintf("converged %.1fs after the last fault, %.1fs after the writes stopped; %s", r.after, r.afterEnd, s)
}

// logPath returns the path of the controller's log for this run.
func (r *runner) logPath(scenario string) string {
	name := fmt.Sprintf("%s-r%d.log", r.impl, r.rep)
	if scenario != "faults" {
		name = scenario + "-" + name
	}
	return filepath.Join(r.cfg.work, "logs", name)
}

// begin resets the namespace, starts the controller with the kubeconfig at
// kubeconfig, logging to logPath, and waits until it has mirrored every
// source. It returns how long that took, in seconds from the start of the
// controller. The caller stops r.ctl.
func (r *runner) begin(ctx context.Context, kubeconfig, logPath string) (float64, error) {
	if err := r.reset(ctx); err != nil {
		return 0, fmt.Errorf("resetting the namespace: %w", err)
	}
	started := time.Now()
	var err error
	if r.ctl, err = startController(r.bin, logPath, "-kubeconfig", kubeconfig, "-namespace", r.cfg.namespace); err != nil {
		return 0, err
	}
	if _, last, err := r.waitConverged(ctx, time.Now().Add(initialTimeout)); err != nil {
		r.ctl.stop()
		return 0, fmt.Errorf("initial mirroring: %w (%s); log: %s", err, last, logPath)
	}
	return time.Since(started).Seconds(), nil
}

func (r *runner) run(ctx context.Context) (runResult, error) {
	rr := runResult{impl: r.impl, rep: r.rep, log: r.logPath("faults")}
	faults, err := plan(r.cfg)
	if err != nil {
		return rr, err
	}
	if rr.initial, err = r.begin(ctx, r.kubeconfig, rr.log); err != nil {
		return rr, err
	}
	defer r.ctl.stop()

	t0 := time.Now()
	w := startWriters(r.cs, r.cfg)
	events, lastEnd, err := r.inject(ctx, t0, faults)
	rr.events = events
	if err != nil {
		w.stop()
		return rr, err
	}
	if err := sleepUntil(ctx, t0.Add(r.cfg.duration)); err != nil {
		w.stop()
		return rr, err
	}
	rr.writes = w.stop()
	written := time.Now()
	if lastEnd.IsZero() { // no faults: measure from the end of the writes
		lastEnd = written
	}
	rr.lastEnd, rr.written = lastEnd.Sub(t0).Seconds(), written.Sub(t0).Seconds()
	rr.overlap = overlapLength(events)

	at, last, err := r.waitConverged(ctx, written.Add(r.cfg.timeout))
	switch {
	case errors.Is(err, errNotConverged):
		rr.outcome = fmt.Sprintf("did not converge within %s after the writes stopped (%s)", r.cfg.timeout, last)
	case errors.Is(err, errExited):
		rr.outcome = fmt.Sprintf("controller exited (%v) before converging (%s)", r.ctl.err, last)
	case err != nil:
		return rr, err
	default:
		rr.after, rr.afterEnd = at.Sub(lastEnd).Seconds(), at.Sub(written).Seconds()
	}
	r.ctl.stop()
	rr.logStats = readLog(rr.log)
	return rr, nil
}

// overlapLength returns how long the pause that spanned a restart lasted,
// from the events of a run.
func overlapLength(events []event) float64 {
	var paused time.Duration
	killed := false
	for _, e := range events {
		switch e.what {
		case "pause controller":
			paused, killed = e.at, false
		case "kill API server":
			killed = paused > 0
		case "resume controller":
			if killed {
				return (e.at - paused).Seconds()
			}
			paused = 0
		}
	}
	return 0
}

// reset makes the namespace hold exactly the sources, each with data v=0,
// and no mirrors, so that every run starts from the same state.
func (r *runner) reset(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.namespace}}
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cms := r.cs.CoreV1().ConfigMaps(r.cfg.namespace)
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < r.cfg.objects; i = int(next.Add(1)) - 1 {
				_, err := cms.Create(ctx, source(r.cfg.namespace, i, "0"), metav1.CreateOptions{})
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// sourceName returns the name of the i-th source.
func sourceName(i int) string { return fmt.Sprintf("s%04d", i) }

func source(ns string, i int, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sourceName(i), Labels: map[string]string{mirror.SourceLabel: mirror.SourceValue}},
		Data:       map[string]string{"v": v},
	}
}

// writeCounts are the outcomes of the writers' requests.
type writeCounts struct {
	Acked   int64 // the server made the change
	Refused int64 // the server answered 404 or 409: a patch or delete of a deleted source, a create of an existing one
	Failed  int64 // no answer, or another error: the API server was down or starting
}

type writers struct {
	done                   chan struct{}
	wg                     sync.WaitGroup
	acked, refused, failed atomic.Int64
}

// startWriters starts cfg.writers goroutines that share cfg.rate writes per
// second to random sources: 90% merge patches of the data, 5% deletions, 5%
// creations, each with a new value. Writes that find every writer busy
// are skipped.
func startWriters(cs kubernetes.Interface, cfg config) *writers {
	w := &writers{done: make(chan struct{})}
	cms := cs.CoreV1().ConfigMaps(cfg.namespace)
	tokens := make(chan struct{})
	go func() {
		defer close(tokens)
		tick := time.NewTicker(time.Second / time.Duration(cfg.rate))
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			select {
			case tokens <- struct{}{}:
			default:
			}
		}
	}()
	var seq atomic.Int64
	for n := range cfg.writers {
		w.wg.Go(func() {
			// Not canceled by the driver's context: a write in flight
			// when the writes stop is let finish, bounded by the
			// client's timeout.
			ctx := context.Background()
			rnd := rand.New(rand.NewPCG(uint64(n), 1))
			for range tokens {
				i := rnd.IntN(cfg.objects)
				v := strconv.FormatInt(seq.Add(1), 10)
				var err error
				switch rnd.IntN(20) {
				case 0:
					err = cms.Delete(ctx, sourceName(i), metav1.DeleteOptions{})
				case 1:
					_, err = cms.Create(ctx, source(cfg.namespace, i, v), metav1.CreateOptions{})
				default:
					patch := `{"data":{"v":"` + v + `"}}`
					_, err = cms.Patch(ctx, sourceName(i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				}
				switch {
				case err == nil:
					w.acked.Add(1)
				case apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err):
					w.refused.Add(1)
				default:
					w.failed.Add(1)
				}
			}
		})
	}
	return w
}

// stop stops the writers, waits for their last requests and returns the
// counts.
func (w *writers) stop() writeCounts {
	close(w.done)
	w.wg.Wait()
	return writeCounts{Acked: w.acked.Load(), Refused: w.refused.Load(), Failed: w.failed.Load()}
}

// state compares the mirrors with the sources on the server.
type state struct {
	sources, missing, stale, orphans int
}

func (s state) converged() bool { return s.missing == 0 && s.stale == 0 && s.orphans == 0 }

func (s state) String() string {
	return fmt.Sprintf("%d sources: %d without a mirror, %d with different data, %d mirrors without a source",
		s.sources, s.missing, s.stale, s.orphans)
}

// check lists the namespace on the server and compares.
func (r *runner) check(ctx context.Context) (state, error) {
	list, err := r.cs.CoreV1().ConfigMaps(r.cfg.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return state{}, err
	}
	src, dst := map[string]map[string]string{}, map[string]map[string]string{}
	for _, cm := range list.Items {
		if name, ok := strings.CutPrefix(cm.Name, mirror.Name("")); ok {
			dst[name] = cm.Data
		} else if cm.Labels[mirror.SourceLabel] == mirror.SourceValue {
			src[cm.Name] = cm.Data
		}
	}
	s := state{sources: len(src)}
	for name, data := range src {
		got, ok := dst[name]
		switch {
		case !ok:
			s.missing++
		case !equalData(got, data):
			s.stale++
		}
	}
	for name := range dst {
		if _, ok := src[name]; !ok {
			s.orphans++
		}
	}
	return s, nil
}

func equalData(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var (
	errNotConverged = errors.New("not converged")
	errExited       = errors.New("the controller exited")
)

// waitConverged polls the server until the mirrors match the sources and
// keep matching for stableFor, and returns when the first of those polls
// returned. It gives up at deadline, or if the controller exits.
func (r *runner) waitConverged(ctx context.Context, deadline time.Time) (time.Time, state, error) {
	var (
		since time.Time // first poll of the current run of matching polls
		last  state
	)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		s, err := r.check(ctx)
		now := time.Now()
		switch {
		case err != nil:
			since = time.Time{}
		case s.converged():
			last = s
			if since.IsZero() {
				since = now
			}
			if now.Sub(since) >= stableFor {
				return since, s, nil
			}
		default:
			last, since = s, time.Time{}
		}
		if now.After(deadline) {
			return time.Time{}, last, errNotConverged
		}
		select {
		case <-ctx.Done():
			return time.Time{}, last, ctx.Err()
		case <-r.ctl.exited:
			return time.Time{}, last, errExited
		case <-tick.C:
		}
	}
}

// controller is a running mirror binary.
type controller struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	err    error // Wait's result, set before exited is closed
}

func startController(bin, logPath string, args ...string) (*controller, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Should the driver die, so does the controller, even while stopped.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	c := &controller{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *controller) signal(sig syscall.Signal) error {
	select {
	case <-c.exited:
		return fmt.Errorf("the controller exited (%v)", c.err)
	default:
		return c.cmd.Process.Signal(sig)
	}
}

// stop resumes the controller if it is paused, closes its standard input,
// which makes it shut down, and kills it if it has not exited within 30
// seconds. Calling it again does nothing.
func (c *controller) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// logStats are what a controller's log tells about its watch. All three
// implementations log the reflector's lines: client-go's at -v=4, ctrl's at
// its logger's verbosity 5.
type logStats struct {
	gone    int // watches that ended with 410 Gone ("too old")
	relists int // the reflector's "Listing and watching" lines after the first
	// relistDelay is the seconds from the last 410 Gone to the next
	// relist: how long the cache stayed blind after the last fault; -1 if
	// the log does not show both.
	relistDelay float64
}

var clockTime = regexp.MustCompile(`\d\d:\d\d:\d\d\.\d+`)

// readLog reads the log at path; the time of a line is the first time of day
// in it, which both klog's and the mirror package's formats have.
func readLog(path string) logStats {
	st := logStats{relistDelay: -1}
	data, err := os.ReadFile(path)
	if err != nil {
		return st
	}
	var goneAt time.Time
	for line := range strings.Lines(string(data)) {
		at, _ := time.Parse("15:04:05.999999999", clockTime.FindString(line))
		switch {
		case strings.Contains(line, "too old"):
			st.gone++
			goneAt, st.relistDelay = at, -1
		case strings.Contains(line, "Listing and watching"):
			st.relists++
			if !goneAt.IsZero() && st.relistDelay < 0 {
				st.relistDelay = at.Sub(goneAt).Seconds()
			}
		}
	}
	st.relists = max(st.relists-1, 0)
	return st
}
