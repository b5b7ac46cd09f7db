// Package probe is what the controller binaries of the scale, sharding and
// fleet benchmarks share: a record of which round each object was last
// reconciled at, and a protocol through which the driver tells the process
// when to measure itself. Unlike package harness's fixed sequence, the
// driver sends commands in any order, so one protocol serves a controller
// measured once synced, one measured through update rounds, and replicas
// that each own a share of the objects.
//
// # Protocol
//
// The binary reads one command per line on standard input and answers each
// with one JSON [Answer] on standard output:
//
//	first <n>        wait until n objects were reconciled at least once
//	measure          runtime.GC(), then heap, RSS and goroutines
//	status           counts, without waiting
//	begin            start the update phase: CPU time and GC count are read
//	round <g> <n>    wait until n objects were reconciled at round g or later, after
//	                 their first reconcile
//	end              end the update phase: CPU time and GC count since begin
//	exit             stop the controller and exit
//
// A wait that times out (15 minutes) answers with Error set. Logs go to
// standard error.
package probe

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// maxRounds bounds the rounds one process can be waited for.
const maxRounds = 256

// Recorder remembers the highest round each object was reconciled at.
// Observe is safe for concurrent use and does not allocate.
type Recorder struct {
	seen       []atomic.Int32 // highest round per object; -1: never reconciled
	first      atomic.Int64
	reached    [maxRounds + 1]atomic.Int64 // objects reconciled at round g or later
	reconciles atomic.Int64
	notify     chan struct{}
}

// NewRecorder returns a recorder for the objects 0..n-1.
func NewRecorder(n int) *Recorder {
	r := &Recorder{seen: make([]atomic.Int32, n), notify: make(chan struct{}, 1)}
	for i := range r.seen {
		r.seen[i].Store(-1)
	}
	return r
}

// Observe records a reconcile of object i at round g.
func (r *Recorder) Observe(i, g int) {
	r.reconciles.Add(1)
	if i < 0 || i >= len(r.seen) {
		return
	}
	g = min(g, maxRounds)
	slot := &r.seen[i]
	for {
		old := slot.Load()
		if int32(g) <= old {
			return
		}
		if slot.CompareAndSwap(old, int32(g)) {
			// The first reconcile of an object counts for no round: the
			// driver waits only for rounds it writes after "first".
			if old < 0 {
				r.first.Add(1)
			} else {
				for round := int(old) + 1; round <= g; round++ {
					r.reached[round].Add(1)
				}
			}
			select {
			case r.notify <- struct{}{}:
			default:
			}
			return
		}
	}
}

func (r *Recorder) waitFor(count *atomic.Int64, n int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for count.Load() < n {
		select {
		case <-r.notify:
		case <-deadline.C:
			return fmt.Errorf("%d of %d after %s", count.Load(), n, timeout)
		}
	}
	return nil
}

// Flags are the command line every probe binary shares.
type Flags struct {
	Kubeconfig string
	Namespace  string
	N          int // objects, for the recorder: indexes 0..N-1
	Workers    int
	ProfileDir string
	ProfileTag string
	// SyncGOGC, if positive, is the GOGC the process runs with until
	// WatchSync sees its cache synced and every object reconciled once;
	// then GOGC goes back to what it was.
	SyncGOGC int
}

// Mem is a process's memory, read after runtime.GC().
type Mem struct {
	HeapInuse uint64 `json:"heap_inuse"`
	HeapAlloc uint64 `json:"heap_alloc"`
	HeapSys   uint64 `json:"heap_sys"`
	RSS       int64  `json:"rss"` // VmRSS now
	// MaxRSS is the peak RSS so far: VmHWM, not getrusage's ru_maxrss,
	// which Linux carries across execve from the parent's memory (Go
	// starts children with vfork, sharing the parent's), so it never
	// reads below the driver's own peak.
	MaxRSS     int64  `json:"max_rss"`
	RUMaxRSS   int64  `json:"ru_max_rss"` // ru_maxrss, for comparison
	Goroutines int    `json:"goroutines"`
	NumGC      uint32 `json:"num_gc"`
	// CPU seconds (user+sys) of the process so far.
	CPU float64 `json:"cpu"`
}

// Answer is one line of a probe binary's standard output.
type Answer struct {
	Cmd        string  `json:"cmd"`
	Error      string  `json:"error,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"` // since main started (first) or begin (round)
	First      int64   `json:"first"`
	Reconciles int64   `json:"reconciles"`
	Cached     int     `json:"cached"`
	Mem        *Mem    `json:"mem,omitempty"`
	// The update phase, for end.
	UserSeconds float64 `json:"user_seconds,omitempty"`
	SysSeconds  float64 `json:"sys_seconds,omitempty"`
	GCs         uint32  `json:"gcs,omitempty"`
	Allocated   uint64  `json:"allocated,omitempty"` // heap bytes allocated
	MainUnix    int64   `json:"main_unix_nano,omitempty"`
}

// Probe runs the protocol for one binary.
type Probe struct {
	Flags    Flags
	Recorder *Recorder
	// Ctx is canceled on exit: stop the controller then.
	Ctx context.Context
	// Cached, if set, returns how many objects the controller's cache holds.
	Cached func() int

	name   string
	start  time.Time
	cancel context.CancelFunc
	out    *json.Encoder
}

// Begin parses the flags, with any the binary defined before, and starts
// the clock; name, called after the flags are parsed, names the process in
// errors and profiles. Call it first thing in main.
func Begin(name func() string) *Probe {
	start := time.Now()
	var f Flags
	flag.StringVar(&f.Kubeconfig, "kubeconfig", "", "path of the kubeconfig file")
	flag.StringVar(&f.Namespace, "namespace", "scale", "namespace of the objects")
	flag.IntVar(&f.N, "n", 10000, "number of objects (indexes 0..n-1)")
	flag.IntVar(&f.Workers, "workers", 4, "concurrent reconciles")
	flag.StringVar(&f.ProfileDir, "profile-dir", "", "write heap and goroutine profiles at measure and a CPU profile of the update phase here")
	flag.StringVar(&f.ProfileTag, "profile-tag", "", "suffix of the profile file names")
	flag.IntVar(&f.SyncGOGC, "sync-gogc", 0, "run with this GOGC until the cache has synced and every object was reconciled once (a prototype of a start-up GC setting); 0: unchanged")
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	return &Probe{Flags: f, Recorder: NewRecorder(f.N), Ctx: ctx, name: name(), start: start, cancel: cancel, out: json.NewEncoder(os.Stdout)}
}

// WatchSync restores GOGC once hasSynced reports true and every object
// was reconciled once, if -sync-gogc lowered it for the initial list and
// the first pass of reconciles. Call it before starting the controller.
func (p *Probe) WatchSync(hasSynced func() bool) {
	if p.Flags.SyncGOGC <= 0 {
		return
	}
	prev := debug.SetGCPercent(p.Flags.SyncGOGC)
	go func() {
		for !hasSynced() || p.Recorder.first.Load() < int64(p.Flags.N) {
			time.Sleep(5 * time.Millisecond)
		}
		debug.SetGCPercent(prev)
	}()
}

// Config returns a rest.Config for the kubeconfig with the same client
// limits as the throughput benchmark's.
func (p *Probe) Config() *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Flags.Kubeconfig)
	if err != nil {
		p.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 20, 30
	return cfg
}

// Fatal reports err and exits.
func (p *Probe) Fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, err)
	os.Exit(1)
}

const waitTimeout = 15 * time.Minute

// Run answers the driver's commands until exit; stopped receives when the
// controller has stopped after Ctx is canceled. It does not return.
func (p *Probe) Run(stopped <-chan error) {
	var (
		ru0    syscall.Rusage
		gcs0   uint32
		alloc0 uint64
		cpuPr  *os.File
	)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		a := Answer{Cmd: f[0]}
		arg := func(i int) int64 {
			if i >= len(f) {
				p.Fatal(fmt.Errorf("command %q: missing argument", sc.Text()))
			}
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				p.Fatal(fmt.Errorf("command %q: %v", sc.Text(), err))
			}
			return v
		}
		switch f[0] {
		case "first":
			if err := p.Recorder.waitFor(&p.Recorder.first, arg(1), waitTimeout); err != nil {
				a.Error = "first reconciles: " + err.Error()
			}
			a.Seconds = time.Since(p.start).Seconds()
			a.MainUnix = p.start.UnixNano()
		case "measure":
			a.Mem = Measure()
			p.writeProfile("heap", func(w *os.File) error { return pprof.Lookup("heap").WriteTo(w, 0) })
			p.writeProfile("goroutines", func(w *os.File) error { return pprof.Lookup("goroutine").WriteTo(w, 1) })
		case "status":
		case "begin":
			if p.Flags.ProfileDir != "" {
				var err error
				if cpuPr, err = os.Create(p.profilePath("cpu-update")); err != nil {
					p.Fatal(err)
				}
				if err := pprof.StartCPUProfile(cpuPr); err != nil {
					p.Fatal(err)
				}
			}
			p.writeProfile("allocs-begin", func(w *os.File) error { return pprof.Lookup("allocs").WriteTo(w, 0) })
			gcs0, alloc0 = numGC(), totalAlloc() // after the profile, whose writing is not the phase's
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
				p.Fatal(err)
			}
		case "round":
			g, n := arg(1), arg(2)
			if g < 1 || g > maxRounds {
				p.Fatal(fmt.Errorf("round %d out of 1..%d", g, maxRounds))
			}
			if err := p.Recorder.waitFor(&p.Recorder.reached[g], n, waitTimeout); err != nil {
				a.Error = fmt.Sprintf("round %d: %v", g, err)
			}
		case "end":
			var ru1 syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
				p.Fatal(err)
			}
			a.GCs, a.Allocated = numGC()-gcs0, totalAlloc()-alloc0
			p.writeProfile("allocs-update", func(w *os.File) error { return pprof.Lookup("allocs").WriteTo(w, 0) })
			if cpuPr != nil {
				pprof.StopCPUProfile()
				cpuPr.Close()
				cpuPr = nil
			}
			a.UserSeconds = tv(ru1.Utime) - tv(ru0.Utime)
			a.SysSeconds = tv(ru1.Stime) - tv(ru0.Stime)
		case "exit":
			p.cancel()
			select {
			case err := <-stopped:
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s: stopped with error: %v\n", p.name, err)
				}
			case <-time.After(30 * time.Second):
				fmt.Fprintf(os.Stderr, "%s: did not stop within 30s\n", p.name)
			}
			p.emit(a)
			os.Exit(0)
		default:
			p.Fatal(fmt.Errorf("unknown command %q", sc.Text()))
		}
		a.First = p.Recorder.first.Load()
		a.Reconciles = p.Recorder.reconciles.Load()
		if p.Cached != nil {
			a.Cached = p.Cached()
		}
		p.emit(a)
	}
	p.Fatal(fmt.Errorf("standard input closed before exit: %v", sc.Err()))
}

func (p *Probe) emit(a Answer) {
	if err := p.out.Encode(a); err != nil {
		p.Fatal(err)
	}
}

func (p *Probe) profilePath(kind string) string {
	name := p.name + "-" + kind
	if p.Flags.ProfileTag != "" {
		name = p.name + "-" + p.Flags.ProfileTag + "-" + kind
	}
	return filepath.Join(p.Flags.ProfileDir, name+".pprof")
}

func (p *Probe) writeProfile(kind string, write func(*os.File) error) {
	if p.Flags.ProfileDir == "" {
		return
	}
	f, err := os.Create(p.profilePath(kind))
	if err != nil {
		p.Fatal(err)
	}
	defer f.Close()
	if err := write(f); err != nil {
		p.Fatal(err)
	}
}

// Measure runs a garbage collection and reads the process's memory.
func Measure() *Mem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := &Mem{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, HeapSys: ms.HeapSys,
		Goroutines: runtime.NumGoroutine(), NumGC: ms.NumGC}
	m.RSS, m.MaxRSS = procStatus("VmRSS:"), procStatus("VmHWM:")
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		m.RUMaxRSS = ru.Maxrss * 1024 // KiB on Linux
		m.CPU = tv(ru.Utime) + tv(ru.Stime)
	}
	return m
}

// totalAlloc is how many heap bytes the process allocated so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}

// procStatus returns a size field of /proc/self/status in bytes, or -1.
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return -1
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
