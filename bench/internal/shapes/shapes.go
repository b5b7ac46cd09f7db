// Package shapes is what the controller binaries of the shapes benchmark
// (cmd/shapes) share: the shapes of the slow controller's reconcile, the
// record of what each of the two controllers saw, and the protocol through
// which the driver runs them.
//
// Each binary runs two controllers of ConfigMaps on one cache (one informer)
// in one process: slow, whose reconcile spends a fixed time on work that
// sends no request to the API server (a [Shape]), and fast, which only
// records when it first reconciled each object at each write. The driver
// writes SeqAnnotation, a sequence number that grows with every write of
// the invocation: a run's writes are Base+1 .. Base+N*Rounds, write k to
// object (k-Base-1) mod N.
//
// # Protocol
//
// A binary writes one JSON [Event] per line on standard output and reads one
// command per line on standard input:
//
//	-> {"event":"ready"}       both controllers reconciled every object once
//	<- begin                   the update phase starts: CPU time and counts are read
//	-> {"event":"begun"}
//	<- wait                    the driver has made its last write
//	-> {"event":"caught-up"}   both reconciled every object at its last write; CPU time read at that moment
//	<- end
//	-> {"event":"report"}      the Report; the binary then exits
//
// Logs and errors go to standard error.
package shapes

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl/bench/internal/harness"
)

// SeqAnnotation holds the sequence number of the last write the driver made
// to an object. Objects are created at 0.
const SeqAnnotation = "bench/seq"

// Seq returns the sequence number in an object's annotations: 0 if none.
func Seq(annotations map[string]string) int64 {
	s, err := strconv.ParseInt(annotations[SeqAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return s
}

// ObjectName returns the name of the i-th object.
func ObjectName(i int) string { return harness.ObjectName(i) }

// Sighting is fast's first reconcile of an object at a write: Seq is the
// object's sequence number then, At the wall clock in Unix nanoseconds.
type Sighting struct {
	Seq int64 `json:"s"`
	At  int64 `json:"t"`
}

// Report is what a binary measured over the update phase, from "begin" to
// the moment both controllers had caught up.
type Report struct {
	Impl string `json:"impl"`
	// Sightings[i] are fast's sightings of object i in this run, in order:
	// one for each reconcile that saw a higher sequence number than the
	// last, so a write that fast never saw alone (it saw a later one first)
	// has none of its own.
	Sightings [][]Sighting `json:"sightings"`

	FastReconciles int64 `json:"fast_reconciles"`
	SlowReconciles int64 `json:"slow_reconciles"`
	// FastCaughtUp and SlowCaughtUp are when each had reconciled every
	// object at its last write, Unix nanoseconds.
	FastCaughtUp int64 `json:"fast_caught_up"`
	SlowCaughtUp int64 `json:"slow_caught_up"`

	UserSeconds float64 `json:"user_seconds"` // getrusage(RUSAGE_SELF), begin to caught up
	SysSeconds  float64 `json:"sys_seconds"`
}

// Event is one line of a binary's standard output.
type Event struct {
	Event  string  `json:"event"`
	Report *Report `json:"report,omitempty"`
}

// Flags are the command line of every binary.
type Flags struct {
	Kubeconfig string
	Namespace  string
	N          int
	Base       int64 // this run's writes are Base+1 .. Base+N*Rounds
	Rounds     int
	Variant    Variant
	SpinPerMs  int // iterations of Spin per millisecond of CPU, for a "cpu" shape
}

// Harness runs the protocol for one binary and keeps the record the two
// controllers' reconciles write: call Fast from fast's reconcile and Slow
// from slow's, each with the object they reconcile, and nothing else.
type Harness struct {
	Flags Flags
	// Ctx is canceled when the binary is done: stop the controllers then.
	Ctx context.Context

	name   string
	cancel context.CancelFunc
	out    *json.Encoder

	fast, slow track
	mu         sync.Mutex
	sightings  [][]Sighting
	notify     chan struct{}
}

// track is one controller's record: the highest sequence number it
// reconciled each object at, and counts.
type track struct {
	seen       []atomic.Int64 // -1: never reconciled
	first      atomic.Int64   // objects reconciled at least once
	done       atomic.Int64   // objects reconciled at their last write of the run
	doneAt     atomic.Int64   // Unix nanoseconds done reached N
	reconciles atomic.Int64
}

// Begin parses the flags. Call it first thing in main.
func Begin(name string) *Harness {
	var f Flags
	var variant string
	flag.StringVar(&f.Kubeconfig, "kubeconfig", "", "path of the kubeconfig file")
	flag.StringVar(&f.Namespace, "namespace", "shapes", "namespace of the objects")
	flag.IntVar(&f.N, "n", 200, "number of objects")
	flag.Int64Var(&f.Base, "seq-base", 0, "this run's writes are numbered after this one")
	flag.IntVar(&f.Rounds, "rounds", 2, "writes to every object in this run")
	flag.StringVar(&variant, "variant", "none", "slow's reconcile and the workers: none, wait30ms, cpu10ms, wait30ms-w4, ...")
	flag.IntVar(&f.SpinPerMs, "spin-per-ms", 0, "iterations of the busy loop per millisecond of CPU (required by a cpu shape)")
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Harness{Flags: f, Ctx: ctx, name: name, cancel: cancel, out: json.NewEncoder(os.Stdout),
		sightings: make([][]Sighting, f.N), notify: make(chan struct{}, 1)}
	v, err := ParseVariant(variant)
	if err != nil {
		h.Fatal(err)
	}
	if v.Shape.Kind == "cpu" && f.SpinPerMs <= 0 {
		h.Fatal(fmt.Errorf("variant %s needs -spin-per-ms", v))
	}
	h.Flags.Variant = v
	for _, t := range []*track{&h.fast, &h.slow} {
		t.seen = make([]atomic.Int64, f.N)
		for i := range t.seen {
			t.seen[i].Store(-1)
		}
	}
	return h
}

// Config returns a rest.Config for the kubeconfig, with the client rate
// limits of the throughput benchmark (the controllers send nothing after
// their list and watch).
func (h *Harness) Config() *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Flags.Kubeconfig)
	if err != nil {
		h.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 20, 30
	return cfg
}

// Workers is the Workers of both controllers.
func (h *Harness) Workers() int { return h.Flags.Variant.Workers }

// Fatal reports err and exits.
func (h *Harness) Fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", h.name, err)
	os.Exit(1)
}

// Fast records a reconcile of fast's: the time first, before anything else.
func (h *Harness) Fast(name string, annotations map[string]string) {
	now := time.Now().UnixNano()
	i, seq, ok := h.observe(&h.fast, name, annotations)
	if !ok || seq <= h.fast.seen[i].Load() {
		return
	}
	if seq > h.Flags.Base {
		h.mu.Lock()
		h.sightings[i] = append(h.sightings[i], Sighting{Seq: seq, At: now})
		h.mu.Unlock()
	}
	h.advance(&h.fast, i, seq)
}

// Slow is slow's reconcile: it spends the shape's time on every reconcile
// of an object the driver wrote in this run, then records the reconcile.
// Reconciles of objects not written yet (the first of each, at start-up)
// return at once, so that start-up takes as long whatever the shape; they
// are not measured.
func (h *Harness) Slow(name string, annotations map[string]string) {
	i, seq, ok := h.observe(&h.slow, name, annotations)
	if !ok {
		return
	}
	if seq > h.Flags.Base {
		h.Flags.Variant.Shape.Do(h.Flags.SpinPerMs)
	}
	if seq > h.slow.seen[i].Load() {
		h.advance(&h.slow, i, seq)
	}
}

// observe counts a reconcile and returns the object's index and sequence
// number, and whether it is one of the benchmark's objects.
func (h *Harness) observe(t *track, name string, annotations map[string]string) (int, int64, bool) {
	t.reconciles.Add(1)
	i := harness.ObjectIndex(name)
	if i < 0 || i >= h.Flags.N {
		return 0, 0, false
	}
	return i, Seq(annotations), true
}

// advance raises object i's sequence number to seq, higher than it was. A
// controller never reconciles one object twice at once, so nothing else
// writes its slot meanwhile.
func (h *Harness) advance(t *track, i int, seq int64) {
	old := t.seen[i].Swap(seq)
	if old < 0 && t.first.Add(1) == int64(h.Flags.N) {
		h.signal()
	}
	if last := h.last(i); old < last && seq >= last {
		if t.done.Add(1) == int64(h.Flags.N) {
			t.doneAt.Store(time.Now().UnixNano())
			h.signal()
		}
	}
}

// last returns the sequence number of this run's last write to object i.
func (h *Harness) last(i int) int64 {
	return h.Flags.Base + int64((h.Flags.Rounds-1)*h.Flags.N+i+1)
}

func (h *Harness) signal() {
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// waitFor blocks until done reports true, re-checking whenever a count
// completes, or fails after timeout.
func (h *Harness) waitFor(what string, done func() bool, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !done() {
		select {
		case <-h.notify:
		case <-deadline.C:
			h.Fatal(fmt.Errorf("%s: not after %s (fast %d/%d first, %d/%d caught up; slow %d/%d, %d/%d)", what, timeout,
				h.fast.first.Load(), h.Flags.N, h.fast.done.Load(), h.Flags.N, h.slow.first.Load(), h.Flags.N, h.slow.done.Load(), h.Flags.N))
		}
	}
}

const (
	phaseTimeout = 10 * time.Minute
	stopTimeout  = 30 * time.Second
)

// Run drives the protocol once the controllers are started; stopped
// receives (or is closed) when they have stopped after Ctx is canceled. Run
// does not return.
func (h *Harness) Run(stopped <-chan error) {
	n := int64(h.Flags.N)
	h.waitFor("every object reconciled once by both", func() bool { return h.fast.first.Load() == n && h.slow.first.Load() == n }, phaseTimeout)
	h.emit(Event{Event: "ready"})

	var ru0, ru1 syscall.Rusage
	var fast0, slow0 int64
	rep := Report{Impl: h.name}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "begin":
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
				h.Fatal(err)
			}
			fast0, slow0 = h.fast.reconciles.Load(), h.slow.reconciles.Load()
			h.emit(Event{Event: "begun"})
		case "wait":
			h.waitFor("every object reconciled at its last write by both", func() bool { return h.fast.done.Load() == n && h.slow.done.Load() == n }, phaseTimeout)
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
				h.Fatal(err)
			}
			rep.FastReconciles = h.fast.reconciles.Load() - fast0
			rep.SlowReconciles = h.slow.reconciles.Load() - slow0
			rep.FastCaughtUp, rep.SlowCaughtUp = h.fast.doneAt.Load(), h.slow.doneAt.Load()
			rep.UserSeconds = tvSeconds(ru1.Utime) - tvSeconds(ru0.Utime)
			rep.SysSeconds = tvSeconds(ru1.Stime) - tvSeconds(ru0.Stime)
			h.emit(Event{Event: "caught-up"})
		case "end":
			h.mu.Lock()
			rep.Sightings = h.sightings
			h.emit(Event{Event: "report", Report: &rep})
			h.mu.Unlock()
			h.stop(stopped)
			os.Exit(0)
		default:
			h.Fatal(fmt.Errorf("unknown command %q", cmd))
		}
	}
	h.Fatal(fmt.Errorf("standard input closed before \"end\": %v", sc.Err()))
}

// stop cancels the controllers and waits a while for them to stop.
func (h *Harness) stop(stopped <-chan error) {
	h.cancel()
	select {
	case err := <-stopped:
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopped with error: %v\n", h.name, err)
		}
	case <-time.After(stopTimeout):
		fmt.Fprintf(os.Stderr, "%s: did not stop within %s\n", h.name, stopTimeout)
	}
}

func (h *Harness) emit(e Event) {
	if err := h.out.Encode(e); err != nil {
		h.Fatal(err)
	}
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
