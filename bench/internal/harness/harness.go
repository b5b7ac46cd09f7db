// Package harness is what every benchmarked controller binary shares: its
// flags, the record of which round each object was last seen at, and the
// protocol through which the driver (cmd/run) tells it when to measure.
//
// # Protocol
//
// A controller binary writes one JSON [Event] per line on standard output
// and reads one command per line on standard input:
//
//	-> {"event":"synced"}          the cache has listed every object
//	-> {"event":"ready"}           every object was reconciled once; heap measured after runtime.GC()
//	<- begin                       the update phase starts: CPU time is read
//	-> {"event":"begun"}
//	<- wait <g>                    the driver has written round g to every object
//	-> {"event":"round"}           every object has been reconciled at round g or later
//	<- end                         the update phase ends: CPU time, then heap after runtime.GC()
//	-> {"event":"report"}          the final Report; the binary then exits
//
// Logs and errors go to standard error.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RoundAnnotation holds the round of the last update the driver wrote to an
// object. Objects are created at round 0.
const RoundAnnotation = "bench/round"

// namePrefix starts every benchmark object's name; the rest is its index.
const namePrefix = "cm-"

// ObjectName returns the name of the i-th benchmark object.
func ObjectName(i int) string { return fmt.Sprintf("%s%06d", namePrefix, i) }

// ObjectIndex returns the index in an object name made by ObjectName, or -1.
func ObjectIndex(name string) int {
	if !strings.HasPrefix(name, namePrefix) {
		return -1
	}
	i, err := strconv.Atoi(name[len(namePrefix):])
	if err != nil {
		return -1
	}
	return i
}

// Round returns the round recorded in an object's annotations: 0 if none.
func Round(annotations map[string]string) int {
	g, err := strconv.Atoi(annotations[RoundAnnotation])
	if err != nil {
		return 0
	}
	return g
}

// Recorder remembers the highest round each object was reconciled at and
// counts how many objects reached each round of this run. Observe is safe
// for concurrent use and does not allocate.
type Recorder struct {
	n          int
	base, last int // this run's rounds are base+1 .. last

	seen       []atomic.Int32 // highest round seen per object; -1: never reconciled
	first      atomic.Int64   // objects reconciled at least once
	reached    []atomic.Int64 // reached[g-base-1]: objects seen at round g or later
	reconciles atomic.Int64
	notify     chan struct{} // a count reached n
}

// NewRecorder returns a recorder for n objects and the rounds base+1 ..
// base+rounds.
func NewRecorder(n, base, rounds int) *Recorder {
	r := &Recorder{
		n:       n,
		base:    base,
		last:    base + rounds,
		seen:    make([]atomic.Int32, n),
		reached: make([]atomic.Int64, rounds),
		notify:  make(chan struct{}, 1),
	}
	for i := range r.seen {
		r.seen[i].Store(-1)
	}
	return r
}

// Observe records that the object named name was reconciled with the given
// annotations: the reconcile of every implementation calls it, and nothing
// else.
func (r *Recorder) Observe(name string, annotations map[string]string) {
	r.reconciles.Add(1)
	i := ObjectIndex(name)
	if i < 0 || i >= r.n {
		return
	}
	g := int32(Round(annotations))
	slot := &r.seen[i]
	for {
		old := slot.Load()
		if g <= old {
			return
		}
		if slot.CompareAndSwap(old, g) {
			r.advance(int(old), int(g))
			return
		}
	}
}

// advance counts an object that moved from round old to round g.
func (r *Recorder) advance(old, g int) {
	if old < 0 && r.first.Add(1) == int64(r.n) {
		r.signal()
	}
	for round := max(old, r.base) + 1; round <= min(g, r.last); round++ {
		if r.reached[round-r.base-1].Add(1) == int64(r.n) {
			r.signal()
		}
	}
}

func (r *Recorder) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Reconciles returns how many reconciles have been observed.
func (r *Recorder) Reconciles() int64 { return r.reconciles.Load() }

// waitFor blocks until done reports true, re-checking whenever a count
// completes, or until timeout.
func (r *Recorder) waitFor(done func() bool, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !done() {
		select {
		case <-r.notify:
		case <-deadline.C:
			return fmt.Errorf("timed out after %s", timeout)
		}
	}
	return nil
}

// WaitFirst blocks until every object was reconciled once.
func (r *Recorder) WaitFirst(timeout time.Duration) error {
	if err := r.waitFor(func() bool { return r.first.Load() == int64(r.n) }, timeout); err != nil {
		return fmt.Errorf("waiting for first reconciles (%d of %d): %w", r.first.Load(), r.n, err)
	}
	return nil
}

// WaitRound blocks until every object was reconciled at round g or later.
func (r *Recorder) WaitRound(g int, timeout time.Duration) error {
	if g <= r.base || g > r.last {
		return fmt.Errorf("round %d is not one of this run's rounds %d..%d", g, r.base+1, r.last)
	}
	c := &r.reached[g-r.base-1]
	if err := r.waitFor(func() bool { return c.Load() == int64(r.n) }, timeout); err != nil {
		return fmt.Errorf("waiting for round %d (%d of %d): %w", g, c.Load(), r.n, err)
	}
	return nil
}

// Flags are the command line of every controller binary.
type Flags struct {
	Kubeconfig string
	Namespace  string
	N          int
	RoundBase  int // this run's rounds are RoundBase+1 .. RoundBase+Rounds
	Rounds     int
	Workers    int
	ProfileDir string // write CPU and heap profiles here; "" for none
	ProfileTag string // distinguishes the profiles of repeated runs
}

// Event is one line of a controller binary's standard output.
type Event struct {
	Event   string  `json:"event"`
	Round   int     `json:"round,omitempty"`
	Seconds float64 `json:"seconds,omitempty"` // since "begin", for "round"
	Report  *Report `json:"report,omitempty"`
}

// Report is what a controller binary measured. Heap figures are read from
// runtime.MemStats right after runtime.GC(): HeapInuse counts the bytes in
// in-use spans (live objects plus fragmentation), HeapAlloc the live objects.
type Report struct {
	Impl string `json:"impl"`
	N    int    `json:"n"`
	// Rounds updated in this run; CPU per 1,000 events divides by N*Rounds/1000.
	Rounds int `json:"rounds"`

	MainUnixNano int64 `json:"main_unix_nano"` // when main started, for the driver to compute start-up time

	SyncSeconds  float64 `json:"sync_seconds"`  // main start to cache synced
	FirstSeconds float64 `json:"first_seconds"` // main start to every object reconciled once

	HeapSyncedInuse  uint64 `json:"heap_synced_inuse"`
	HeapSyncedAlloc  uint64 `json:"heap_synced_alloc"`
	HeapUpdatedInuse uint64 `json:"heap_updated_inuse"`
	HeapUpdatedAlloc uint64 `json:"heap_updated_alloc"`

	UpdateUserSeconds float64 `json:"update_user_seconds"`
	UpdateSysSeconds  float64 `json:"update_sys_seconds"`
	UpdateWallSeconds float64 `json:"update_wall_seconds"`
	// UpdateSysmonSeconds is the CPU of the Go runtime's monitor thread
	// (sysmon) over the update phase, part of UpdateUser+SysSeconds; -1 if
	// it could not be read.
	UpdateSysmonSeconds float64 `json:"update_sysmon_seconds"`
	UpdateGCs           uint32  `json:"update_gcs"`
	// UpdateMinorFaults is how many pages the process touched for the
	// first time (or again after the runtime returned them to the OS) over
	// the update phase: each costs system time.
	UpdateMinorFaults int64   `json:"update_minor_faults"`
	CPUPer1kEvents    float64 `json:"cpu_per_1k_events"` // (user+sys) / (N*Rounds/1000)

	MaxRSSBytes       int64 `json:"max_rss_bytes"` // ru_maxrss over the process's life
	ReconcilesAtReady int64 `json:"reconciles_at_ready"`
	Reconciles        int64 `json:"reconciles"`
}

// Harness runs the protocol for one controller binary.
type Harness struct {
	Flags    Flags
	Recorder *Recorder
	// Ctx is canceled when the binary is done: stop the controller then.
	Ctx context.Context

	name   string
	start  time.Time
	cancel context.CancelFunc
	out    *json.Encoder
	report Report
}

// Begin parses the flags and starts the clock. Call it first thing in main.
func Begin(name string) *Harness {
	start := time.Now()
	var f Flags
	flag.StringVar(&f.Kubeconfig, "kubeconfig", "", "path of the kubeconfig file")
	flag.StringVar(&f.Namespace, "namespace", "bench", "namespace of the objects")
	flag.IntVar(&f.N, "n", 20000, "number of objects")
	flag.IntVar(&f.RoundBase, "round-base", 0, "rounds of this run start after this one")
	flag.IntVar(&f.Rounds, "rounds", 2, "number of update rounds in this run")
	flag.IntVar(&f.Workers, "workers", 4, "concurrent reconciles")
	flag.StringVar(&f.ProfileDir, "profile-dir", "", "write pprof CPU (update phase) and heap profiles into this directory")
	flag.StringVar(&f.ProfileTag, "profile-tag", "", "suffix of the profile file names")
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	return &Harness{
		Flags:    f,
		Recorder: NewRecorder(f.N, f.RoundBase, f.Rounds),
		Ctx:      ctx,
		name:     name,
		start:    start,
		cancel:   cancel,
		out:      json.NewEncoder(os.Stdout),
		report:   Report{Impl: name, N: f.N, Rounds: f.Rounds, MainUnixNano: start.UnixNano()},
	}
}

// Config returns a rest.Config for the kubeconfig, with the same client
// rate limits for every implementation.
func (h *Harness) Config() *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Flags.Kubeconfig)
	if err != nil {
		h.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 20, 30
	return cfg
}

// Fatal reports err and exits.
func (h *Harness) Fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", h.name, err)
	os.Exit(1)
}

const (
	phaseTimeout = 15 * time.Minute
	stopTimeout  = 30 * time.Second
)

// Run drives the protocol: hasSynced reports whether the controller's cache
// has synced, stopped is closed (or receives) when the controller has
// stopped after Ctx is canceled. Run does not return.
func (h *Harness) Run(hasSynced func() bool, stopped <-chan error) {
	// The same polling for every implementation: 5 ms adds at most that
	// much to the sync time.
	tick := time.NewTicker(5 * time.Millisecond)
	deadline := time.After(phaseTimeout)
	for !hasSynced() {
		select {
		case <-tick.C:
		case err := <-stopped:
			h.Fatal(fmt.Errorf("controller stopped before its cache synced: %v", err))
		case <-deadline:
			h.Fatal(fmt.Errorf("cache not synced after %s", phaseTimeout))
		}
	}
	tick.Stop()
	h.report.SyncSeconds = time.Since(h.start).Seconds()
	h.emit(Event{Event: "synced"})

	if err := h.Recorder.WaitFirst(phaseTimeout); err != nil {
		h.Fatal(err)
	}
	h.report.FirstSeconds = time.Since(h.start).Seconds()
	h.report.ReconcilesAtReady = h.Recorder.Reconciles()
	h.report.HeapSyncedInuse, h.report.HeapSyncedAlloc, _ = heap()
	h.writeHeapProfile("heap-synced")
	h.emit(Event{Event: "ready"})

	var (
		ru0, ru1   syscall.Rusage
		begun      time.Time
		gcs0, gcs1 uint32
		cpuProfile *os.File
		sysmon     int     // thread ID of sysmon
		sysmon0    float64 // its CPU seconds at "begin"
	)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "begin":
			cpuProfile = h.startCPUProfile()
			_, _, gcs0 = heapNoGC()
			sysmon = sysmonThread()
			sysmon0 = threadSeconds(sysmon)
			begun = time.Now()
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
				h.Fatal(err)
			}
			h.emit(Event{Event: "begun"})
		case "wait":
			g, err := strconv.Atoi(arg)
			if err != nil {
				h.Fatal(fmt.Errorf("bad command %q", sc.Text()))
			}
			if err := h.Recorder.WaitRound(g, phaseTimeout); err != nil {
				h.Fatal(err)
			}
			h.emit(Event{Event: "round", Round: g, Seconds: time.Since(begun).Seconds()})
		case "end":
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
				h.Fatal(err)
			}
			h.report.UpdateWallSeconds = time.Since(begun).Seconds()
			h.report.UpdateSysmonSeconds = -1
			if s := threadSeconds(sysmon); s >= 0 && sysmon0 >= 0 {
				h.report.UpdateSysmonSeconds = s - sysmon0
			}
			_, _, gcs1 = heapNoGC()
			if cpuProfile != nil {
				pprof.StopCPUProfile()
				cpuProfile.Close()
			}
			h.report.UpdateUserSeconds = tvSeconds(ru1.Utime) - tvSeconds(ru0.Utime)
			h.report.UpdateSysSeconds = tvSeconds(ru1.Stime) - tvSeconds(ru0.Stime)
			h.report.UpdateGCs = gcs1 - gcs0
			h.report.UpdateMinorFaults = ru1.Minflt - ru0.Minflt
			events := float64(h.Flags.N*h.Flags.Rounds) / 1000
			h.report.CPUPer1kEvents = (h.report.UpdateUserSeconds + h.report.UpdateSysSeconds) / events
			h.report.HeapUpdatedInuse, h.report.HeapUpdatedAlloc, _ = heap()
			h.writeHeapProfile("heap-updated")
			h.report.Reconciles = h.Recorder.Reconciles()
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
				h.report.MaxRSSBytes = ru.Maxrss * 1024 // KiB on Linux
			}
			h.emit(Event{Event: "report", Report: &h.report})
			h.stop(stopped)
			os.Exit(0)
		default:
			h.Fatal(fmt.Errorf("unknown command %q", sc.Text()))
		}
	}
	h.Fatal(fmt.Errorf("standard input closed before \"end\": %v", sc.Err()))
}

// stop cancels the controller and waits a while for it to stop.
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

func (h *Harness) profilePath(kind string) string {
	name := h.name + "-" + kind
	if h.Flags.ProfileTag != "" {
		name = h.name + "-" + h.Flags.ProfileTag + "-" + kind
	}
	return filepath.Join(h.Flags.ProfileDir, name+".pprof")
}

func (h *Harness) startCPUProfile() *os.File {
	if h.Flags.ProfileDir == "" {
		return nil
	}
	f, err := os.Create(h.profilePath("cpu-update"))
	if err != nil {
		h.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		h.Fatal(err)
	}
	return f
}

// writeHeapProfile writes the heap profile as of the last GC, which heap()
// has just run.
func (h *Harness) writeHeapProfile(kind string) {
	if h.Flags.ProfileDir == "" {
		return
	}
	f, err := os.Create(h.profilePath(kind))
	if err != nil {
		h.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		h.Fatal(err)
	}
}

// heap runs a garbage collection and returns HeapInuse and HeapAlloc.
func heap() (inuse, alloc uint64, gcs uint32) {
	runtime.GC()
	return heapNoGC()
}

func heapNoGC() (inuse, alloc uint64, gcs uint32) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.HeapAlloc, ms.NumGC
}

// sysmonThread returns the thread ID of the Go runtime's monitor, sysmon:
// the first thread the runtime starts after the main one (runtime.main
// starts it before any package is initialized), so the earliest started,
// the lowest ID breaking ties; 0 if /proc cannot tell. The CPU profiler
// never samples it: a thread is sampled once it runs a goroutine, and
// sysmon runs none.
func sysmonThread() int {
	self := os.Getpid()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	best, bestStart := 0, int64(-1)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == self {
			continue
		}
		f, ok := threadStat(tid)
		if !ok {
			continue
		}
		start, err := strconv.ParseInt(f[19], 10, 64) // field 22, starttime
		if err != nil {
			continue
		}
		if bestStart < 0 || start < bestStart || start == bestStart && tid < best {
			best, bestStart = tid, start
		}
	}
	return best
}

// threadSeconds returns the user+system CPU seconds of a thread of this
// process, -1 if it cannot be read.
func threadSeconds(tid int) float64 {
	if tid == 0 {
		return -1
	}
	f, ok := threadStat(tid)
	if !ok {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return -1
	}
	return float64(utime+stime) / 100 // USER_HZ
}

// threadStat returns the fields of /proc/self/task/<tid>/stat after the
// command name: f[0] is field 3.
func threadStat(tid int) ([]string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return nil, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(s[i+1:])
	return f, len(f) >= 20
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
