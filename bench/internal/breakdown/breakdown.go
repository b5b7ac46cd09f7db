// Package breakdown sorts the samples of a controller's CPU profile into
// buckets of cost: what reading the watch stream off the connection costs
// (transport), inflating it (decompression), turning it into objects
// (decoding), handing work between goroutines (scheduling), the controller
// library itself (library), the garbage collector (GC), and the rest.
//
// # The rule
//
// Each sample is one stack. The rules below are tried in order, and the
// first one that matches any frame of the stack, leaf or caller, decides
// the sample's bucket. The order matters where stacks nest: a gzip read
// runs inside the decoder's read of the response body, a body read inside
// the decoder, a wake-up inside the work queue's Add, a GC assist inside
// any allocation.
//
//  1. other: the profiler writing its own profile (runtime/pprof), which
//     would otherwise count as decompression and transport.
//  2. GC: the runtime's collector: background mark workers, mark assists
//     paid by allocating goroutines, sweeping, scavenging, write barriers
//     (runtime.gc*, runtime.bgsweep, runtime.bgscavenge, runtime.sweepone,
//     runtime.deductSweepCredit, runtime.markroot, runtime.scanobject,
//     runtime.wbBufFlush, internal/runtime/gc/...).
//  3. scheduling: the scheduler parking, waking and finding goroutines and
//     threads (runtime.schedule, findRunnable, park_m, gopark, goready,
//     ready, wakep, startm, stopm, notesleep, notewakeup, futexsleep,
//     futexwakeup, netpoll, sysmon, ...): the cost of every hand-off
//     between goroutines, wherever it starts.
//  4. decompression: compress/flate, compress/gzip, hash/crc32.
//  5. transport: TLS, sockets and HTTP/2 framing (crypto/..., net.,
//     net/http., golang.org/x/net/http2, internal/poll, syscall), including
//     the copy of a response body out of HTTP/2's buffer into the decoder's.
//  6. decoding: the watch decoder's goroutine and the serializers
//     (k8s.io/apimachinery/pkg/watch.(*StreamWatcher), k8s.io/client-go/rest/watch,
//     k8s.io/apimachinery/pkg/runtime/serializer, .../util/framer,
//     encoding/json, sigs.k8s.io/json, protobuf, ctrl's binding.Stream, any *.Unmarshal method),
//     the allocations it makes included.
//  7. library: the controller library's code and what it calls (ctrl and
//     its internal packages, controller-runtime, client-go's tools/cache,
//     util/workqueue, informers and listers, the raw controllers' loop in
//     bench/internal/rawctl): reflector, store, event handlers, work queue,
//     worker loop, cache reads, deep copies, and the reconcile function
//     the library calls, which is the same for every implementation.
//  8. other: everything else.
//
// An API server's profile is split in two only: serving watches (the stack
// runs through the watch handler or a cache watcher:
// k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer),
// k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher)), which is where a
// watching client's encoding, compression and flow control cost the server,
// and the rest. The HTTP/2 connection's writer and TLS are shared by every
// stream of a connection and count in the rest.
package breakdown

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// Bucket is a kind of CPU cost.
type Bucket int

// The buckets, in the order reports show them.
const (
	Transport Bucket = iota
	Decompression
	Decoding
	Scheduling
	Library
	GC
	Other
	numBuckets
)

// Buckets lists every bucket in report order.
var Buckets = []Bucket{Transport, Decompression, Decoding, Scheduling, Library, GC, Other}

func (b Bucket) String() string {
	return [...]string{"transport", "decompression", "decoding", "scheduling", "library", "GC", "other"}[b]
}

// rule matches a frame by its function name: by exact name, by prefix, or
// by substring.
type rule struct {
	bucket   Bucket
	exact    []string
	prefixes []string
	contains []string
}

func (r rule) matches(fn string) bool {
	for _, e := range r.exact {
		if fn == e {
			return true
		}
	}
	for _, p := range r.prefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	for _, c := range r.contains {
		if strings.Contains(fn, c) {
			return true
		}
	}
	return false
}

// rules are tried in order; see the package doc.
var rules = []rule{
	{bucket: Other, prefixes: []string{"runtime/pprof."}},
	{
		bucket: GC,
		prefixes: []string{
			"runtime.gc", "runtime.(*gc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.sweepone",
			"runtime.(*sweepLocked).sweep", "runtime.deductSweepCredit", "runtime.markroot",
			"runtime.scanobject", "runtime.scanblock", "runtime.scanstack", "runtime.greyobject",
			"runtime.wbBufFlush", "internal/runtime/gc/",
		},
	},
	{
		bucket: Scheduling,
		exact: []string{
			"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.gopark", "runtime.goparkunlock",
			"runtime.goready", "runtime.ready", "runtime.readyWithTime", "runtime.wakep", "runtime.startm",
			"runtime.stopm", "runtime.handoffp", "runtime.notesleep", "runtime.notetsleepg", "runtime.notewakeup",
			"runtime.futexsleep", "runtime.futexwakeup", "runtime.mPark", "runtime.netpoll", "runtime.sysmon",
			"runtime.goschedImpl", "runtime.gosched_m", "runtime.goexit0", "runtime.newproc", "runtime.exitsyscall0",
			"runtime.entersyscallblock", "runtime.stealWork", "runtime.runqgrab", "runtime.osyield", "runtime.usleep",
			"runtime.mstart1", "runtime.resetspinning",
		},
	},
	{
		bucket:   Decompression,
		prefixes: []string{"compress/flate.", "compress/gzip.", "hash/crc32."},
	},
	{
		bucket: Transport,
		prefixes: []string{
			"crypto/", "net.", "net/http.", "golang.org/x/net/http2", "vendor/golang.org/x/net/",
			"internal/poll.", "syscall.", "internal/runtime/syscall",
		},
	},
	{
		bucket: Decoding,
		prefixes: []string{
			"k8s.io/apimachinery/pkg/watch.(*StreamWatcher)", "k8s.io/client-go/rest/watch.",
			"k8s.io/apimachinery/pkg/runtime/serializer", "k8s.io/apimachinery/pkg/util/framer",
			"encoding/json.", "sigs.k8s.io/json", "k8s.io/apimachinery/pkg/util/json",
			"github.com/gogo/protobuf", "google.golang.org/protobuf",
			"github.com/typedctrl/ctrl/internal/binding.(*Stream[",
		},
		contains: []string{").Unmarshal"},
	},
	{
		bucket: Library,
		prefixes: []string{
			"github.com/typedctrl/ctrl.", "github.com/typedctrl/ctrl/internal/",
			"github.com/typedctrl/ctrl/bench/internal/rawctl.", "sigs.k8s.io/controller-runtime/",
			"k8s.io/client-go/tools/cache", "k8s.io/client-go/util/workqueue",
			"k8s.io/client-go/informers", "k8s.io/client-go/listers",
		},
	},
}

// Classify returns the bucket of a stack, given as function names from the
// leaf to the root.
func Classify(stack []string) Bucket {
	for _, r := range rules {
		for _, fn := range stack {
			if r.matches(fn) {
				return r.bucket
			}
		}
	}
	return Other
}

// Breakdown is CPU time per bucket, in nanoseconds.
type Breakdown [numBuckets]int64

// Total returns the sum over the buckets.
func (b Breakdown) Total() int64 {
	var t int64
	for _, v := range b {
		t += v
	}
	return t
}

// Share returns bucket's part of the total, from 0 to 1; 0 for an empty
// breakdown.
func (b Breakdown) Share(bucket Bucket) float64 {
	t := b.Total()
	if t == 0 {
		return 0
	}
	return float64(b[bucket]) / float64(t)
}

// Add returns the sum of two breakdowns.
func (b Breakdown) Add(o Breakdown) Breakdown {
	for i := range b {
		b[i] += o[i]
	}
	return b
}

// Of classifies the samples of a CPU profile.
func Of(p *profile.Profile) (Breakdown, error) {
	idx, err := cpuIndex(p)
	if err != nil {
		return Breakdown{}, err
	}
	var b Breakdown
	var stack []string
	for _, s := range p.Sample {
		stack = stack[:0]
		for _, loc := range s.Location {
			for _, line := range loc.Line { // inlined frames first, as in the stack
				if line.Function != nil {
					stack = append(stack, line.Function.Name)
				}
			}
		}
		b[Classify(stack)] += s.Value[idx]
	}
	return b, nil
}

// File classifies the samples of the CPU profile at path.
func File(path string) (Breakdown, error) {
	p, err := parse(path)
	if err != nil {
		return Breakdown{}, err
	}
	b, err := Of(p)
	if err != nil {
		return Breakdown{}, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// watchServing matches the frames of an API server serving a watch.
var watchServing = rule{prefixes: []string{
	"k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer)",
	"k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher)",
}}

// Server splits an API server's CPU profile: nanoseconds spent serving
// watches, and in all.
type Server struct{ Watching, Total int64 }

// Add returns the sum of two splits.
func (s Server) Add(o Server) Server { return Server{s.Watching + o.Watching, s.Total + o.Total} }

// Share returns the part spent serving watches, from 0 to 1.
func (s Server) Share() float64 {
	if s.Total == 0 {
		return 0
	}
	return float64(s.Watching) / float64(s.Total)
}

// ServerFile splits the API server's CPU profile at path.
func ServerFile(path string) (Server, error) {
	p, err := parse(path)
	if err != nil {
		return Server{}, err
	}
	idx, err := cpuIndex(p)
	if err != nil {
		return Server{}, fmt.Errorf("%s: %w", path, err)
	}
	var s Server
	for _, sample := range p.Sample {
		v := sample.Value[idx]
		s.Total += v
	frames:
		for _, loc := range sample.Location {
			for _, line := range loc.Line {
				if line.Function != nil && watchServing.matches(line.Function.Name) {
					s.Watching += v
					break frames
				}
			}
		}
	}
	return s, nil
}

func parse(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// cpuIndex returns the index of the CPU time among a profile's values.
func cpuIndex(p *profile.Profile) (int, error) {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i, nil
		}
	}
	return 0, fmt.Errorf("not a CPU profile: no cpu/nanoseconds sample type")
}
