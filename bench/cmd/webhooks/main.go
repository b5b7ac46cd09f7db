// Command webhooks runs the admission webhook benchmark of package
// internal/admission (BenchmarkAdmission) for ctrl, controller-runtime and
// the floor, interleaved, several times each, and prints medians; with
// -write it replaces the "webhooks" section of ../BENCHMARKS.md.
//
//	cd bench && go run ./cmd/webhooks -write
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/admission"
	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
)

func main() {
	testing.Init()
	benchtime := flag.Duration("benchtime", 5*time.Second, "how long each benchmark runs")
	reps := flag.Int("r", 3, "repetitions of each benchmark; medians are reported")
	write := flag.Bool("write", false, "replace the webhooks section of ../BENCHMARKS.md")
	flag.Parse()
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fail(err)
	}

	run := benchdoc.Begin("..")
	modes := []string{"serial", "parallel"}
	results := map[string][]testing.BenchmarkResult{} // by mode/impl
	for rep := range *reps {
		for _, mode := range modes {
			for _, impl := range admission.Implementations {
				r := testing.Benchmark(func(b *testing.B) { admission.Benchmark(b, impl, mode == "parallel") })
				if r.N == 0 {
					fail(fmt.Errorf("%s/%s failed: run `go test -run '^$' -bench Admission/%s/%s` to see why", mode, impl, mode, impl))
				}
				fmt.Fprintf(os.Stderr, "%d %s/%s\t%s\t%s\n", rep+1, mode, impl, r, r.MemString())
				results[mode+"/"+impl] = append(results[mode+"/"+impl], r)
			}
		}
	}
	run.Finish()

	doc := report(run, *benchtime, *reps, modes, results)
	fmt.Print(doc)
	if *write {
		if err := benchdoc.WriteSection("../BENCHMARKS.md", "webhooks", doc); err != nil {
			fail(err)
		}
	}
}

// row is the medians of one mode and implementation.
type row struct {
	reqPerSec, nsPerOp, cpuPerOp, allocs, bytes float64
}

func medians(rs []testing.BenchmarkResult) row {
	med := func(f func(testing.BenchmarkResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return row{
		reqPerSec: med(func(r testing.BenchmarkResult) float64 { return r.Extra["req/s"] }),
		nsPerOp:   med(func(r testing.BenchmarkResult) float64 { return float64(r.NsPerOp()) }),
		cpuPerOp:  med(func(r testing.BenchmarkResult) float64 { return r.Extra["cpu-ns/op"] }),
		allocs:    med(func(r testing.BenchmarkResult) float64 { return float64(r.AllocsPerOp()) }),
		bytes:     med(func(r testing.BenchmarkResult) float64 { return float64(r.AllocedBytesPerOp()) }),
	}
}

func report(run *benchdoc.Run, benchtime time.Duration, reps int, modes []string, results map[string][]testing.BenchmarkResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, `## Admission webhooks

Validating admission requests per second through ctrl's webhook server and controller-runtime v0.25.2's, with
the same validator, payload and client, in one process. Written by `+"`bench/cmd/webhooks -write`"+`; the benchmark
is `+"`BenchmarkAdmission`"+` in [bench/webhook_test.go](bench/webhook_test.go), its body in
[bench/internal/admission](bench/internal/admission).

### Setup

- date: %s (run took %s)
- machine: %s
- load average (1, 5, 15 min): %s before, %s after; other work on the machine slows the wall-clock figures
  more than the CPU ones
- Go: %s; k8s.io modules v0.37.2
- ctrl: %s
- command: `+"`cd bench && go run ./cmd/webhooks -write`"+` (%s per benchmark, R = %d, medians shown); the Go
  benchmark alone: `+"`cd bench && go test -run '^$' -bench Admission -benchtime 5s -count 3`"+`
- transport: HTTPS over loopback, HTTP/2, one kept-alive connection (as the API server calls webhooks), the
  serving certificate from `+"`ctrl.WriteWebhookCerts`"+`, the URL with the API server's `+"`?timeout=10s`"+`
- payload: an admission.k8s.io/v1 AdmissionReview creating a ConfigMap with 3 labels, 2 annotations and
  16 data keys of 64 bytes (%d bytes in all), with the user info the API server sends; the validator allows it after a
  few map lookups
- serial: one request at a time (the round trip); parallel: 8 requests in flight per CPU (`+"`b.RunParallel`"+`)

| implementation | what it is |
|---|---|
| ctrl | `+"`ctrl.Validate(mgr, ctrl.Validator[*corev1.ConfigMap]{Create: ...})`"+`, served by the manager on `+"`Options.WebhookAddress`"+` |
| controller-runtime | `+"`webhook.NewServer(...).Register(path, admission.WithValidator[*corev1.ConfigMap](scheme, v))`"+`, started with `+"`Start`"+` |
| floor | a bare `+"`net/http`"+` TLS server that reads the body and writes a fixed answer: what TLS, HTTP/2 and the client cost alone |

### Results

| mode | implementation | requests/s | ns/op | CPU µs/op | CPU µs/op above the floor | allocs/op | B/op |
|---|---|--:|--:|--:|--:|--:|--:|
`, run.Started.UTC().Format("2006-01-02 15:04 MST"), run.Finished.Sub(run.Started).Round(time.Second), benchdoc.Machine(),
		run.LoadBefore, run.LoadAfter, runtime.Version(), run.Library, benchtime, reps, len(admission.Payload()))
	rows := map[string]row{}
	for _, mode := range modes {
		floor := medians(results[mode+"/floor"])
		for _, impl := range admission.Implementations {
			r := medians(results[mode+"/"+impl])
			rows[mode+"/"+impl] = r
			above := "–"
			if impl != "floor" {
				above = fmt.Sprintf("%.1f", (r.cpuPerOp-floor.cpuPerOp)/1e3)
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.1f | %s | %.0f | %.0f |\n",
				mode, impl, r.reqPerSec, r.nsPerOp, r.cpuPerOp/1e3, above, r.allocs, r.bytes)
		}
	}
	fmt.Fprintf(&b, `
- requests/s: b.N over the wall time; ns/op: wall time per request, client and server together.
- CPU µs/op: user and system CPU time of the process per request (`+"`getrusage`"+`), client and server together;
  above the floor: minus the floor's, so what the webhook library itself costs per request.
- allocs/op, B/op: the process's, client's share included (the floor's allocations are the client's and
  net/http's).

### Ratios

| mode | requests/s, ctrl vs controller-runtime | CPU above the floor, ctrl vs controller-runtime | allocs/op above the floor, ctrl vs controller-runtime |
|---|--:|--:|--:|
`)
	for _, mode := range modes {
		c, cr, f := rows[mode+"/ctrl"], rows[mode+"/controller-runtime"], rows[mode+"/floor"]
		fmt.Fprintf(&b, "| %s | %.2fx | %.2fx | %.2fx |\n", mode, c.reqPerSec/cr.reqPerSec,
			(c.cpuPerOp-f.cpuPerOp)/(cr.cpuPerOp-f.cpuPerOp), (c.allocs-f.allocs)/(cr.allocs-f.allocs))
	}
	b.WriteString(`
Both libraries spend most of their own time decoding JSON with encoding/json. ctrl decodes a validating review's
objects straight into the Go type in one pass over the body and reads only the request fields it uses;
controller-runtime decodes the whole AdmissionRequest, then the object again from its raw bytes through the
Scheme's deserializer.
`)
	return b.String()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "webhooks:", err)
	os.Exit(1)
}
