package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// profileRun is an update run with a CPU profile, and where its time went.
type profileRun struct {
	Run  memRun
	Path string
	Cats []float64 // seconds per category, in the order of categories
	All  float64   // seconds sampled
}

// categories are the parts of a controller's CPU an update event goes
// through, as regular expressions over the functions of a sample's stack.
// A sample can fall in several (an allocation made while decoding).
var categories = []struct{ name, focus string }{
	{"reading the connection (HTTP/2 frames and window updates, or HTTP/1.1; TLS, syscalls)", `http2\.\(\*ClientConn\)\.readLoop|binding\.\(\*Stream\[.*\]\)\.fill|framer\.\(\*lengthDelimitedFrameReader\)\.Read`},
	{"gzip", `^compress/`},
	{"decoding watch events (protobuf)", `protobuf\.\(\*Serializer\)\.Decode|binding\.\(\*Stream\[.*\]\)\.event`},
	{"the cache's store and event handlers", `ctrl\.\(\*feed\[.*\]\)\.(Add|Update|Delete|Replace|remove)$|cache\.\(\*threadSafeMap|cache\.\(\*sharedIndexInformer\)\.(OnAdd|OnUpdate|OnDelete|HandleDeltas)|cache\.\(\*processorListener|cache\.\(\*RealFIFO\)\.(Add|Update|Delete)|cache\.\(\*DeltaFIFO`},
	{"the queue, workers and reconcile", `ctrl\.\(\*Controller|ctrl/internal/workq\.|workqueue|main\.main\.func`},
	{"allocation (mallocgc, with GC assists)", `runtime\.mallocgc`},
	{"garbage collection (background marking)", `runtime\.gcBgMarkWorker`},
	{"goroutine scheduling (park, find work, wake)", `runtime\.mcall|runtime\.schedule`},
}

var (
	totalRE = regexp.MustCompile(`Total samples = ([0-9.]+)(m?s)`)
	focusRE = regexp.MustCompile(`accounting for ([0-9.]+)(m?s), [0-9.]+% of`)
)

func seconds(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	if unit == "ms" {
		f /= 1000
	}
	return f
}

// breakdown returns the seconds of each category in the CPU profile at
// path, and the seconds sampled, with go tool pprof.
func breakdown(path string) ([]float64, float64, error) {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=1", path).CombinedOutput()
	if err != nil {
		return nil, 0, fmt.Errorf("go tool pprof %s: %v: %s", path, err, out)
	}
	m := totalRE.FindStringSubmatch(string(out))
	if m == nil {
		return nil, 0, fmt.Errorf("go tool pprof %s: no total in %q", path, out)
	}
	all := seconds(m[1], m[2])
	cats := make([]float64, len(categories))
	for i, c := range categories {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", "-focus="+c.focus, path).CombinedOutput()
		if err != nil {
			return nil, 0, fmt.Errorf("go tool pprof -focus=%s %s: %v: %s", c.focus, path, err, out)
		}
		if m := focusRE.FindStringSubmatch(string(out)); m != nil {
			cats[i] = seconds(m[1], m[2])
		}
	}
	return cats, all, nil
}

// profileTable shows where each profiled implementation's CPU per update
// went, in CPU ms per 1,000 events.
func (res *results) profileTable() string {
	var b strings.Builder
	b.WriteString("| CPU ms per 1k updates, share of samples | ")
	for _, p := range res.Profiles {
		b.WriteString(p.Run.Impl + " | ")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("--:|", len(res.Profiles)))
	b.WriteString("\n| all (getrusage) |")
	for _, p := range res.Profiles {
		fmt.Fprintf(&b, " %.0f |", p.Run.cpuPer1k()*1000)
	}
	b.WriteString("\n| all sampled by the profiler |")
	for _, p := range res.Profiles {
		fmt.Fprintf(&b, " %.0f |", p.All/(float64(p.Run.Events)/1000)*1000)
	}
	for i, c := range categories {
		fmt.Fprintf(&b, "\n| %s |", c.name)
		for _, p := range res.Profiles {
			if p.All == 0 {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %.0f (%.0f%%) |", p.Cats[i]/(float64(p.Run.Events)/1000)*1000, 100*p.Cats[i]/p.All)
		}
	}
	b.WriteString("\n")
	return b.String()
}
