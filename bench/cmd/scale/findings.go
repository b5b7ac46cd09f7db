package main

import (
	"fmt"
	"strings"
)

// findings explains the figures: what the targets' misses come from and
// what the library could change, with the numbers of this invocation.
func (res *results) findings() string {
	top := res.top()
	var b strings.Builder
	b.WriteString("\n### Findings\n\n")

	// Memory per object.
	if cr := res.perObject("cr-default", top); cr > 0 {
		fmt.Fprintf(&b, "- **Heap per Pod.** A whole Pod costs %s KiB of heap in controller-runtime's default cache, of which managedFields\n", kib(cr))
		fmt.Fprintf(&b, "  are %s KiB (cr-default against cr-strip); ctrl drops them by default (ctrl-full %s KiB). Metadata only holds %s KiB\n",
			kib(cr-res.perObject("cr-strip", top)), kib(res.perObject("ctrl-full", top)), kib(res.perObject("ctrl-meta", top)))
		fmt.Fprintf(&b, "  per Pod (labels and annotations are most of it), a projection %s KiB: the projection keeps 7 labels, and a struct\n", kib(res.perObject("ctrl-project", top)))
		b.WriteString("  without them would hold less still.\n")
	}

	// CPU per update.
	base, okB := res.median(res.Upd, "raw-strip", top, mCPU)
	meta, okM := res.median(res.Upd, "ctrl-meta", top, mCPU)
	proj, okP := res.median(res.Upd, "ctrl-project", top, mCPU)
	if okB && okM && okP {
		fmt.Fprintf(&b, "- **CPU per update.** ctrl-meta takes %s of raw-strip's CPU per update and ctrl-project %s, against a target of\n", ratio(meta, base), ratio(proj, base))
		b.WriteString("  0.6x. Decoding is no longer the cost: ctrl skips by length the protobuf fields a cache does not keep, and\n")
		b.WriteString("  decodes each event on the goroutine that stores it (BenchmarkDecodePodEvent: a projection's event decodes in about\n")
		b.WriteString("  a tenth of client-go's whole decoding). What remains is the same whatever the cache keeps: reading the connection\n")
		b.WriteString("  (HTTP/2 frames, one read per event at this rate), the queue and a worker waking for each key, the reconcile's\n")
		b.WriteString("  metrics, and the collector's fixed work per cycle.\n")
		if p := res.profile("raw-strip"); p != nil && p.All > 0 {
			fmt.Fprintf(&b, "  raw-strip spends %.0f%% of its samples in gzip, which ctrl does not ask for (compare raw-strip-nogzip).\n", 100*p.Cats[1]/p.All)
		}
		b.WriteString("  Both levers the earlier profiles named are in: the field filter and one goroutine from socket to store. A small\n")
		b.WriteString("  cache's collector runs every few hundred events unless GOGC is raised (see the GOGC rows) or a memory budget\n")
		b.WriteString("  paces it (Options.MemoryLimit, see the container rows).\n")
	}

	// Knobs.
	var knobLines []string
	for _, r := range res.Knobs {
		def, ok := res.firstUpdate(r.Impl)
		if !ok {
			continue
		}
		if r.Killed {
			knobLines = append(knobLines, fmt.Sprintf("%s with %s: killed by the kernel for the limit (%s MiB; charged at most %s MiB), %d OOM kills",
				r.Impl, r.Variant, mibI(r.Limit), mibI(r.CgroupPeak), r.OOMKills))
			continue
		}
		line := fmt.Sprintf("%s with %s: peak RSS %s MiB against %s (%s of its heap against %s), CPU until synced %.1f s against %.1f, CPU per 1k updates %.3f against %.3f",
			r.Impl, r.Variant, mibI(r.peakRSS()), mibI(def.peakRSS()), ratio(float64(r.peakRSS()), float64(r.Synced.HeapInuse)),
			ratio(float64(def.peakRSS()), float64(def.Synced.HeapInuse)), r.Synced.CPU, def.Synced.CPU, r.cpuPer1k(), def.cpuPer1k())
		if r.Limit > 0 {
			line += fmt.Sprintf(" (%s); the cgroup was charged at most %s MiB of its %s MiB limit (%s), %d OOM kills",
				ratio(r.cpuPer1k(), def.cpuPer1k()), mibI(r.CgroupPeak), mibI(r.Limit), ratio(float64(r.CgroupPeak), float64(r.Limit)), r.OOMKills)
		}
		knobLines = append(knobLines, line)
	}
	if len(knobLines) > 0 {
		b.WriteString("- **Peak RSS.** With the default GOGC of 100, the heap may grow to twice what the last collection left live before the\n")
		b.WriteString("  next one; during the initial list the live heap only grows, so each collection finds little garbage and the peak\n")
		b.WriteString("  nears twice the final heap, plus what the runtime has not yet returned to the system. The transient memory of the list\n")
		b.WriteString("  itself is small beside it: the reflector streams the initial list (`WatchListClient`, on by default in client-go\n")
		b.WriteString("  v0.37), so no list response is held whole, and ctrl's `Replace` builds one map of keys. A small heap adds the runtime's\n")
		b.WriteString("  fixed memory (binary, stacks, metadata: tens of MiB), which no setting removes, so the ratio only means something at\n")
		b.WriteString("  large heaps. The settings, against the same implementation's default run:\n")
		for _, l := range knobLines {
			b.WriteString("  - " + l + ";\n")
		}
		b.WriteString("  A soft memory limit is the knob that bounds the peak, at the cost of collections whenever the heap nears it, which\n")
		b.WriteString("  a controller whose cache grows (more objects, larger objects) pays all the time; a low GOGC only while the cache\n")
		b.WriteString("  lists costs CPU during the sync and nothing afterwards. The library could do the latter itself (an option, or by\n")
		b.WriteString("  default, restoring the user's GOGC once every cache has synced), and a deployment can set GOMEMLIMIT from its\n")
		b.WriteString("  container limit.\n")
	}

	// Sharding.
	if ref := res.shardHeap(0, ""); ref > 0 {
		k := res.Cfg.Replicas[len(res.Cfg.Replicas)-1]
		var refCPU float64
		for _, r := range res.Shard {
			if r.Replicas == 0 {
				refCPU = r.cpuPer1k()
			}
		}
		for _, mode := range []string{"labels", "server"} {
			one := res.shardHeap(1, mode)
			w, cpu, ok := res.worstShard(k, mode)
			if !ok || one == 0 {
				continue
			}
			n, _ := res.shardLabeled(k, mode)
			fmt.Fprintf(&b, "- **Sharding, mode %s.** At %d replicas the largest replica holds %s of the heap of a single replica; its CPU per\n", mode, k, ratio(w, one))
			fmt.Fprintf(&b, "  update of its own objects is %.3f s per 1k against %.3f unsharded. %d of %d objects were labeled for the ring (once each at most).\n",
				cpu, refCPU, n, res.Cfg.ShardN)
		}
		b.WriteString("  No replica is special: each caches its share and, in label mode, a metadata cache of the objects not labeled yet.\n")
	}
	return b.String()
}

// profile returns the profiled run of impl, or nil.
func (res *results) profile(impl string) *profileRun {
	for i := range res.Profiles {
		if res.Profiles[i].Run.Impl == impl {
			return &res.Profiles[i]
		}
	}
	return nil
}

// firstUpdate returns impl's first default update run at the largest count.
func (res *results) firstUpdate(impl string) (memRun, bool) {
	for _, r := range res.Upd {
		if r.Impl == impl && r.Variant == "" {
			return r, true
		}
	}
	return memRun{}, false
}
