package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
)

type results struct {
	cfg  config
	run  *benchdoc.Run
	runs []fleetRun
}

func (res *results) median(impl string, members int, get func(fleetRun) float64) float64 {
	var vs []float64
	for _, r := range res.runs {
		if r.impl == impl && r.members == members {
			vs = append(vs, get(r))
		}
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

var (
	getFirst = func(r fleetRun) float64 { return r.first }
	getHeap  = func(r fleetRun) float64 { return float64(r.mem.HeapInuse) }
	getAlloc = func(r fleetRun) float64 { return float64(r.mem.HeapAlloc) }
	getRSS   = func(r fleetRun) float64 { return float64(r.mem.RSS) }
	getPeak  = func(r fleetRun) float64 { return float64(r.mem.MaxRSS) }
	getGor   = func(r fleetRun) float64 { return float64(r.mem.Goroutines) }
)

func mib(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
func kib(v float64) string { return fmt.Sprintf("%.0f", v/1024) }

// perMember is the slope of get from the fewest to the most members.
func (res *results) perMember(impl string, get func(fleetRun) float64) float64 {
	lo, hi := res.cfg.members[0], res.cfg.members[len(res.cfg.members)-1]
	if lo == hi {
		return res.median(impl, hi, get) / float64(hi)
	}
	return (res.median(impl, hi, get) - res.median(impl, lo, get)) / float64(hi-lo)
}

func (res *results) document() string {
	c := res.cfg
	lo, hi := c.members[0], c.members[len(c.members)-1]
	var b strings.Builder
	b.WriteString("## Fleet: memory and goroutines per member cluster\n\n")
	b.WriteString("What a controller process pays for each member cluster it watches: ctrl's fleet (`Manager.Engage` and a cache with\n")
	b.WriteString("`CacheOptions.Fleet`) against controller-runtime v0.25.2 with one `cluster.Cluster` per member in one process. The\n")
	b.WriteString("comparison multicluster-runtime invites is not possible here: `sigs.k8s.io/multicluster-runtime` is not served by the\n")
	b.WriteString("module proxy this project builds from, so the controller-runtime side is what multicluster-runtime builds on, written by\n")
	b.WriteString("hand: per member a `cluster.Cluster` (its own HTTP client, RESTMapper and cache), added to the manager, and one typed\n")
	b.WriteString("controller whose requests carry the member's name, fed by a `source.TypedKind` on each member's cache, as\n")
	b.WriteString("multicluster-runtime's `mcreconcile.Request` does. Written by `bench/cmd/fleet -write`.\n\n")
	b.WriteString("### Setup\n\n")
	b.WriteString(res.run.Setup("the control planes share the machine with the controller; memory and goroutines do not depend on the load, times do",
		"go run ./cmd/fleet "+c.args))
	fmt.Fprintf(&b, "- members: %d real control planes (etcd and kube-apiserver on loopback), each engaged under several names: member `m-NN` is\n", c.servers)
	fmt.Fprintf(&b, "  control plane NN mod %d, through a kubeconfig file of its own; each name gets its own connection, list, watch and cache,\n", c.servers)
	b.WriteString("  as a distinct cluster would, though members on one control plane share that server's work\n")
	fmt.Fprintf(&b, "- in each member, the controller caches the ConfigMaps of namespace `%s`: %d of 64 bytes of data (a small cache each)\n", c.namespace, c.objects)
	b.WriteString("- the hub (the manager's own cluster) is control plane 0; it caches nothing\n")
	fmt.Fprintf(&b, "- each run is its own process: it engages the members, and is measured once it has reconciled every member's ConfigMaps;\n")
	fmt.Fprintf(&b, "  R = %d runs of each, interleaved, medians; heap is `HeapInuse` after `runtime.GC()` (live heap `HeapAlloc` in parentheses),\n", c.r)
	b.WriteString("  RSS `VmRSS` then, peak RSS `VmHWM`; 4 workers; client limits 20/s, burst 30 per member\n\n")

	b.WriteString("| implementation | members | all reconciled once s | heap MiB | RSS MiB | peak RSS MiB | goroutines |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, impl := range c.impls {
		for _, m := range c.members {
			fmt.Fprintf(&b, "| %s | %d | %.3f | %s (%s) | %s | %s | %.0f |\n", impl, m, res.median(impl, m, getFirst),
				mib(res.median(impl, m, getHeap)), mib(res.median(impl, m, getAlloc)), mib(res.median(impl, m, getRSS)),
				mib(res.median(impl, m, getPeak)), res.median(impl, m, getGor))
		}
	}
	fmt.Fprintf(&b, "\nPer member cluster: the slope from %d to %d members.\n\n", lo, hi)
	b.WriteString("| implementation | heap KiB per member | live heap KiB per member | RSS KiB per member | goroutines per member |\n|---|--:|--:|--:|--:|\n")
	for _, impl := range c.impls {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f |\n", impl, kib(res.perMember(impl, getHeap)), kib(res.perMember(impl, getAlloc)),
			kib(res.perMember(impl, getRSS)), res.perMember(impl, getGor))
	}
	if slices.Contains(c.impls, "ctrl") && slices.Contains(c.impls, "cr") {
		r := func(get func(fleetRun) float64) string {
			a, z := res.perMember("ctrl", get), res.perMember("cr", get)
			if z == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", a/z)
		}
		fmt.Fprintf(&b, "| ctrl vs cr | %s | %s | %s | %s |\n", r(getHeap), r(getAlloc), r(getRSS), r(getGor))
	}
	b.WriteString("\n![heap against member clusters](bench/charts/fleet-heap.svg)\n\n")
	b.WriteString("Every run:\n\n| rep | implementation | members | all reconciled once s | heap MiB | live heap MiB | RSS MiB | peak RSS MiB | goroutines |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range res.runs {
		fmt.Fprintf(&b, "| %d | %s | %d | %.3f | %s | %s | %s | %s | %d |\n", r.rep, r.impl, r.members, r.first, mib(getHeap(r)), mib(getAlloc(r)),
			mib(getRSS(r)), mib(getPeak(r)), r.mem.Goroutines)
	}
	b.WriteString(res.findings())
	return b.String()
}

// findings explains the figures with this invocation's numbers; what it
// says of goroutines and heap comes from the goroutine and heap profiles
// of such runs (-profile-dir).
func (res *results) findings() string {
	c := res.cfg
	if !slices.Contains(c.impls, "ctrl") || !slices.Contains(c.impls, "cr") {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n### Findings\n\n")
	fmt.Fprintf(&b, "- Each member costs ctrl %s KiB of heap and %.1f goroutines, controller-runtime %s KiB and %.1f. ctrl's goroutines\n",
		kib(res.perMember("ctrl", getHeap)), res.perMember("ctrl", getGor), kib(res.perMember("cr", getHeap)), res.perMember("cr", getGor))
	b.WriteString("  per member are those of one watch: the HTTP/2 connection's read loop and the watch request's stream, and client-go's\n")
	b.WriteString("  reflector (its watch loop, the decoder goroutine of its `StreamWatcher`, and a resync goroutine that only waits, since\n")
	b.WriteString("  ctrl's store never asks for resyncs). A `cluster.Cluster` adds a shared informer's processor and listener goroutines,\n")
	b.WriteString("  its runnable group and context plumbing; its heap holds a discovery RESTMapper per member (filled on the first\n")
	b.WriteString("  request) and, with client-go's default gzip, a decompressor per watch.\n")
	fmt.Fprintf(&b, "- With %d members the whole process holds %s MiB of heap with ctrl and %s MiB with controller-runtime; RSS %s and %s MiB.\n",
		c.members[len(c.members)-1], mib(res.median("ctrl", c.members[len(c.members)-1], getHeap)), mib(res.median("cr", c.members[len(c.members)-1], getHeap)),
		mib(res.median("ctrl", c.members[len(c.members)-1], getRSS)), mib(res.median("cr", c.members[len(c.members)-1], getRSS)))
	b.WriteString("  What ctrl could still save per member: the reflector's idle resync goroutine (client-go starts it for every\n")
	b.WriteString("  list-and-watch, resync period or not), and the decoder goroutine, if ctrl decoded watch events on the reflector's own.\n")
	return b.String()
}
