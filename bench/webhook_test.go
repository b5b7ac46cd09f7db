package bench_test

import (
	"testing"

	"github.com/typedctrl/ctrl/bench/internal/admission"
)

// BenchmarkAdmission measures one validating admission request per op
// through ctrl's webhook server, controller-runtime's, and the floor (a bare
// TLS server answering a fixed response): HTTPS over loopback, HTTP/2 with
// keep-alive, the same 2 KiB AdmissionReview of a ConfigMap and the same
// validator. serial sends one request at a time (the round trip); parallel
// keeps 8 requests per CPU in flight (the throughput). Client and server
// share the process, so ns/op and allocs/op include the client's share,
// which is the floor's. See package internal/admission.
//
//	go test -run '^$' -bench Admission -benchtime 5s -count 3
func BenchmarkAdmission(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range admission.Implementations {
			b.Run(mode+"/"+impl, func(b *testing.B) { admission.Benchmark(b, impl, mode == "parallel") })
		}
	}
}
