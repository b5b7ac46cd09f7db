package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/typedctrl/ctrl/bench/internal/svgchart"
)

// document is the scale section of BENCHMARKS.md.
func (res *results) document() string {
	c := res.Cfg
	top := res.top()
	var b strings.Builder
	b.WriteString("## Scale: memory at 10k to 100k Pods, metadata, projections and sharding\n\n")
	b.WriteString("How much a controller process holds when it caches many large objects, and how ctrl's ways of holding less\n")
	b.WriteString("(metadata only, a projection, sharding) compare with controller-runtime v0.25.2 and hand-written client-go.\n")
	b.WriteString("Each implementation is its own process, against a real kube-apiserver and etcd on loopback; no scheduler or\n")
	b.WriteString("kubelet runs, so the Pods are only objects. Written by `bench/cmd/scale -write`, which also draws the charts in\n")
	b.WriteString("[bench/charts](bench/charts).\n\n")

	b.WriteString("### Setup\n\n")
	b.WriteString(res.Run.Setup("the control plane, the writers and the controller share the machine; memory figures do not depend on the load, CPU and wall-clock figures do",
		"go run ./cmd/scale "+c.Args))
	var creates []string
	for _, n := range c.Counts {
		if s, ok := res.CreateSeconds[n]; ok {
			creates = append(creates, fmt.Sprintf("up to %d in %.0f s", n, s))
		}
	}
	fmt.Fprintf(&b, "- Pods: %s, by %d parallel writers with plain creates (the server records managedFields, as for a ReplicaSet's Pods); created once, in steps, and reused by every implementation\n",
		strings.Join(creates, ", "), c.Writers)
	if len(c.APIServerFlags) > 0 {
		fmt.Fprintf(&b, "- kube-apiserver flags added: `%s` (etcd's quota is 2 GiB: 100k Pods with their managedFields take about half, and each\n", strings.Join(c.APIServerFlags, " "))
		b.WriteString("  update round's old revisions must be compacted away before the next rounds fill the rest)\n")
	}
	b.WriteString("- each Pod (package `bench/internal/podgen`) is what a Deployment of a typical service makes: an init container, the app and a\n")
	b.WriteString("  proxy sidecar with 5 to 12 environment variables each, resources, liveness and readiness probes, four volumes and their\n")
	b.WriteString("  mounts, 7 labels, 5 annotations, an owner reference, tolerations; 5.5 KiB as JSON before managedFields\n")
	b.WriteString("- every controller: 4 workers, reconcile reads the object and records the round annotation it carries; client limits 20/s, burst 30\n")
	b.WriteString("- memory: measured once every Pod was reconciled once; heap is `runtime.MemStats.HeapInuse` right after `runtime.GC()`, live heap\n")
	b.WriteString("  `HeapAlloc`; RSS is `VmRSS` then; peak RSS is `VmHWM` (the high-water mark of RSS over the process's life; `ru_maxrss` would inherit the driver's, see package probe)\n\n")

	b.WriteString("| implementation | what it is |\n|---|---|\n")
	for _, im := range impls {
		if slices.Contains(slices.Concat(c.MemImpls, c.UpdateImpls, c.KnobImpls, c.ProfImpls), im.name) {
			fmt.Fprintf(&b, "| %s | %s |\n", im.name, im.what)
		}
	}
	b.WriteString("\n### Memory\n\n")
	b.WriteString("![heap against Pods cached](bench/charts/scale-heap.svg)\n\n")
	b.WriteString("![peak RSS against Pods cached](bench/charts/scale-rss.svg)\n\n")
	b.WriteString(res.memoryTable())
	fmt.Fprintf(&b, "\n- heap per Pod: the slope of the heap from %d to %d Pods, which leaves out what the process holds with no Pods.\n", c.Counts[0], top)
	b.WriteString("- CPU s until then: user+sys CPU of the process from its start until every Pod was reconciled once: the cost of the initial list.\n\n")
	if p, cr := res.perObject("ctrl-project", top), res.perObject("cr-default", top); p > 0 && cr > 0 {
		m, _ := res.memRun("ctrl-meta", top)
		fmt.Fprintf(&b, "Per Pod, ctrl-project holds %s KiB against cr-default's %s KiB (%s), ctrl-meta %s KiB (%s), cr-meta %s KiB (%s).",
			kib(p), kib(cr), ratio(p, cr), kib(res.perObject("ctrl-meta", top)), ratio(res.perObject("ctrl-meta", top), cr),
			kib(res.perObject("cr-meta", top)), ratio(res.perObject("cr-meta", top), cr))
		_ = m
		b.WriteString("\n\n")
	}

	if len(res.Upd) > 0 {
		b.WriteString("### CPU per update event\n\n")
		fmt.Fprintf(&b, "At %d Pods cached, each run writes %d rounds of one merge patch of the round annotation to the first %d Pods (one watch event\n", top, c.G, c.UpdateN)
		fmt.Fprintf(&b, "each) and waits until the controller has reconciled each at that round; CPU is the controller's user+sys CPU\n")
		fmt.Fprintf(&b, "(`getrusage`) over those rounds, per 1,000 events. R = %d runs of each, interleaved; medians.\n\n", c.R)
		b.WriteString(res.updateSummary())
		b.WriteString("\nEvery run:\n\n")
		b.WriteString(res.updateTable(res.Upd, false))
		b.WriteString("\n")
	}
	if len(res.Knobs) > 0 {
		b.WriteString("### GOGC and GOMEMLIMIT\n\n")
		fmt.Fprintf(&b, "The same update runs at %d Pods with the Go runtime's settings changed through the environment: GOGC (collect when\n", top)
		b.WriteString("the heap has grown by that percentage of what the last collection left live; 100 by default), GOMEMLIMIT at 1.2x the heap\n")
		b.WriteString("of the default run (a soft limit: the collector runs as often as it must to stay under it), and a prototype of what a\n")
		b.WriteString("library could do on its own: a low GOGC only until the cache has synced and every object was reconciled once (`-sync-gogc`:\n")
		b.WriteString("`debug.SetGCPercent` in the binary, back to 100 then). The first row of each implementation is its first default update run.\n\n")
		var rows []memRun
		for _, name := range c.KnobImpls {
			for _, r := range res.Upd {
				if r.Impl == name && r.Rep <= 1 {
					rows = append(rows, r)
					break
				}
			}
			for _, r := range res.Knobs {
				if r.Impl == name {
					rows = append(rows, r)
				}
			}
		}
		b.WriteString(res.updateTable(rows, true))
		b.WriteString("\n")
	}
	if len(res.Profiles) > 0 {
		b.WriteString("### Where the CPU of an update goes\n\n")
		fmt.Fprintf(&b, "One more update run of each, at %d Pods, with a CPU profile (`pprof`, 100 Hz) over the update phase. Each row is the\n", top)
		b.WriteString("CPU of the samples whose stack holds the functions named (`go tool pprof -focus`), per 1,000 updates, and its share of\n")
		b.WriteString("all samples; a sample can count in several rows (an allocation made while decoding), so the rows do not add up. The\n")
		fmt.Fprintf(&b, "profiles are in `%s`.\n\n", filepath.Join(c.Work, "profiles"))
		b.WriteString(res.profileTable())
		b.WriteString("\n")
	}
	if len(res.Shard) > 0 {
		b.WriteString("### Sharding\n\n")
		fmt.Fprintf(&b, "ctrl's sharded controller (`ctrl.Options{Sharding: ctrl.Sharding{Ring, Identity}}`) over %d ConfigMaps of 1 KiB of data\n", c.ShardN)
		b.WriteString("(created in ")
		fmt.Fprintf(&b, "%.0f s), at 1, 2 and 3 replicas, each its own process with 8 workers and no client rate limit, in both modes: `labels`\n", res.ShardCreateSeconds)
		b.WriteString("(`Sharding.ByLabel`: each object gets the ring's label once, from the replica that serves it) and `server` (the API server,\n")
		b.WriteString("with `--feature-gates=ShardedListAndWatch=true`, selects each replica's share by hash: nothing is written to objects); and\n")
		b.WriteString("unsharded (`mode cm`, the same controller without `Sharding`) for reference. Each ring has a name of its own. The driver\n")
		b.WriteString("waits until every object is in exactly one replica's cache and every replica has been idle for two polls 2 s apart\n")
		fmt.Fprintf(&b, "(ring settled: from the start of the processes), measures, then writes %d rounds of one patch to every ConfigMap; a round ends\n", c.G)
		b.WriteString("when every replica has reconciled each of its objects at that round. There is no sharder: every replica computes the\n")
		b.WriteString("same split and takes its share.\n\n")
		b.WriteString("![heap per replica](bench/charts/scale-shard.svg)\n\n")
		b.WriteString(res.shardTable())
		b.WriteString("\n")
	}
	b.WriteString("### Targets\n\n")
	b.WriteString(res.targetTable())
	b.WriteString(res.findings())
	if _, ok := faultsChart(filepath.Join(c.Repo, "BENCHMARKS.md")); ok {
		b.WriteString("\nThis driver also draws the medians of the [faults section](#recovery-after-control-plane-faults), as that section\n")
		b.WriteString("stood when it ran (bench/cmd/faults writes no data of its own besides its section):\n\n")
		b.WriteString("![recovery after control-plane faults](bench/charts/faults-convergence.svg)\n")
	}
	fmt.Fprintf(&b, "\nLogs of the last invocation are in `%s`.\n", filepath.Join(c.Work, "logs"))
	return b.String()
}

// writeCharts writes the SVG charts into dir.
func (res *results) writeCharts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name, svg string) error { return os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644) }
	heap, rss := svgchart.Chart{Title: "Heap once synced (HeapInuse after GC)", XLabel: "Pods cached", YLabel: "MiB"},
		svgchart.Chart{Title: "Peak RSS (VmHWM)", XLabel: "Pods cached", YLabel: "MiB"}
	for _, name := range res.Cfg.MemImpls {
		var hs, rs svgchart.Series
		hs.Name, rs.Name = name, name
		hs.Dash = strings.HasPrefix(name, "cr") || strings.HasPrefix(name, "raw")
		rs.Dash = hs.Dash
		for _, n := range res.Cfg.Counts {
			if r, ok := res.memRun(name, n); ok {
				hs.X, hs.Y = append(hs.X, float64(n)), append(hs.Y, float64(r.Synced.HeapInuse)/(1<<20))
				rs.X, rs.Y = append(rs.X, float64(n)), append(rs.Y, float64(r.peakRSS())/(1<<20))
			}
		}
		if len(hs.X) > 0 {
			heap.Series, rss.Series = append(heap.Series, hs), append(rss.Series, rs)
		}
	}
	if len(heap.Series) > 0 {
		if err := write("scale-heap.svg", svgchart.Lines(heap)); err != nil {
			return err
		}
		if err := write("scale-rss.svg", svgchart.Lines(rss)); err != nil {
			return err
		}
	}
	if len(res.Shard) > 0 {
		ch := svgchart.Chart{Title: fmt.Sprintf("Heap of the largest replica, %d ConfigMaps", res.Cfg.ShardN), YLabel: "MiB"}
		labels, server := svgchart.Series{Name: "mode labels"}, svgchart.Series{Name: "mode server"}
		for _, k := range append([]int{0}, res.Cfg.Replicas...) {
			name := fmt.Sprintf("%d replicas", k)
			switch k {
			case 0:
				name = "unsharded"
			case 1:
				name = "1 replica"
			}
			ch.Groups = append(ch.Groups, name)
			l, _, _ := res.worstShard(k, "labels")
			s, _, _ := res.worstShard(k, "server")
			if k == 0 {
				l, _, _ = res.worstShard(0, "")
				s = l
			}
			labels.Y, server.Y = append(labels.Y, l/(1<<20)), append(server.Y, s/(1<<20))
		}
		ch.Series = []svgchart.Series{labels, server}
		if err := write("scale-shard.svg", svgchart.Bars(ch)); err != nil {
			return err
		}
	}
	if ch, ok := faultsChart(filepath.Join(res.Cfg.Repo, "BENCHMARKS.md")); ok {
		if err := write("faults-convergence.svg", svgchart.Bars(ch)); err != nil {
			return err
		}
	}
	return nil
}

// faultsChart reads the medians of the faults section of BENCHMARKS.md,
// as bench/cmd/faults wrote them: per scenario (a "### " heading), the
// first table whose third column is "median", rows ctrl, cr and raw.
func faultsChart(path string) (svgchart.Chart, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return svgchart.Chart{}, false
	}
	doc := string(data)
	start := strings.Index(doc, "<!-- section: faults -->")
	end := strings.Index(doc, "<!-- end section: faults -->")
	if start < 0 || end < start {
		return svgchart.Chart{}, false
	}
	ch := svgchart.Chart{Title: "Recovery after control-plane faults (median s)", YLabel: "s until converged (each scenario's own measure)"}
	impls := []string{"ctrl", "cr", "raw"}
	series := make([]svgchart.Series, len(impls))
	for i, name := range impls {
		series[i].Name = name
	}
	for _, part := range strings.Split(doc[start:end], "\n### ")[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		inTable, found := false, map[string]float64{}
		for line := range strings.Lines(body) {
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			switch {
			case len(cells) >= 3 && cells[0] == "implementation" && cells[2] == "median":
				inTable = true
			case inTable && len(cells) >= 3:
				if v, err := strconv.ParseFloat(cells[2], 64); err == nil {
					found[cells[0]] = v
				}
			case inTable && strings.TrimSpace(line) == "":
				inTable = false
			}
			if len(found) == len(impls) {
				break
			}
		}
		if len(found) != len(impls) {
			continue
		}
		ch.Groups = append(ch.Groups, strings.ToLower(strings.TrimSpace(heading)))
		for i, name := range impls {
			series[i].Y = append(series[i].Y, found[name])
		}
	}
	ch.Series = series
	return ch, len(ch.Groups) > 0
}
