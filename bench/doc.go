// Package bench compares ctrl with controller-runtime and hand-written
// client-go. It is its own module, so that controller-runtime never enters
// ctrl's go.mod.
//
//   - cmd/ctrl, cmd/cr-default, cmd/cr-strip, cmd/raw and cmd/raw-strip are
//     the same ConfigMap controller written five ways, each a binary that
//     speaks the protocol of package internal/harness. cmd/ctrl-copy,
//     cmd/raw-strip-copy and cmd/raw-strip-nogzip are diagnostics, run after
//     them: ctrl and raw-strip with a deep copy per reconcile, as
//     controller-runtime makes, and raw-strip without response compression,
//     as ctrl runs by default.
//   - cmd/run is the driver of the throughput benchmark: it starts a real
//     control plane through ../internal/cmd/runcontrolplane, creates
//     the objects, runs the binaries through rounds of updates and reports
//     medians (run.sh), with each controller's CPU by bucket of cost
//     (package internal/breakdown; cmd/breakdown prints one profile's) and
//     the API server's CPU per update.
//   - cmd/mirror-ctrl, cmd/mirror-cr and cmd/mirror-raw are the mirror
//     controller of package internal/mirror written three ways, and
//     cmd/faults is the driver of the fault benchmark: it kills and restarts
//     the API server and pauses the controller while writers change the
//     sources, stops the writes at an outage that fails every reconcile, and
//     makes the controller's connections go silently dead through the proxy
//     of package internal/blackhole, and reports how long each controller
//     takes to catch up (run-faults.sh).
//   - cmd/shapes is the driver of the shapes benchmark: cmd/shapes-ctrl,
//     cmd/shapes-cr and cmd/shapes-raw each run two controllers on one
//     cache, one whose reconcile waits or computes for a fixed time
//     (package internal/shapes) and one whose time to see each write the
//     driver reports, beside the slow one's reconciles and the CPU.
//   - Each driver's -write replaces its own section of ../BENCHMARKS.md
//     (package internal/benchdoc) and leaves the others as they are.
//   - micro_test.go measures the per-event cost of the queue, dispatch,
//     cache read and reconcile path on client-go's fake clientset.
//   - webhook_test.go (BenchmarkAdmission) measures admission requests
//     through ctrl's webhook server and controller-runtime's, over HTTPS on
//     loopback (package internal/admission); cmd/webhooks runs it and
//     writes its section of ../BENCHMARKS.md.
//   - cmd/scale is the driver of the scale benchmark: cmd/scale-ctrl,
//     cmd/scale-cr and cmd/scale-raw cache 10k to 100k Pods (package
//     internal/podgen) whole, as metadata or projected, and run a sharded
//     ctrl controller at 1 to 3 replicas; they speak the protocol of package
//     internal/probe. It draws charts (package internal/svgchart) into
//     charts/.
//   - cmd/fleet is the driver of the fleet benchmark: cmd/fleet-ctrl and
//     cmd/fleet-cr watch 1 to 50 member clusters from one process.
package bench
