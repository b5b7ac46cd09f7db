// Package bench compares ctrl with controller-runtime and hand-written
// client-go. It is its own module, so that controller-runtime never enters
// ctrl's go.mod.
//
//   - cmd/ctrl, cmd/cr-default, cmd/cr-strip, cmd/raw and cmd/raw-strip are
//     the same ConfigMap controller written five ways, each a binary that
//     speaks the protocol of package internal/harness. cmd/ctrl-nocopy and
//     cmd/raw-strip-copy are diagnostics, run only when asked for: ctrl
//     without its deep copy per reconcile, and raw-strip with one.
//   - cmd/run is the driver: it starts a real control plane through
//     ../internal/testenv/cmd/controlplane, creates the objects, runs the
//     binaries through rounds of updates and reports medians (run.sh).
//   - micro_test.go measures the per-event cost of the queue, dispatch,
//     cache read and reconcile path on client-go's fake clientset.
package bench
