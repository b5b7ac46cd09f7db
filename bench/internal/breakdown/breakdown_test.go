package breakdown

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name  string
		stack []string // leaf first
		want  Bucket
	}{
		{"gzip under the decoder's body read", []string{
			"compress/flate.(*decompressor).huffmanBlock", "compress/flate.(*decompressor).Read", "compress/gzip.(*Reader).Read",
			"golang.org/x/net/http2.(*gzipReader).Read", "io.ReadAtLeast", "k8s.io/apimachinery/pkg/util/framer.(*lengthDelimitedFrameReader).Read",
			"k8s.io/apimachinery/pkg/runtime/serializer/streaming.(*decoder).Decode", "k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive",
		}, Decompression},
		{"body read under the decoder", []string{
			"runtime.memmove", "bytes.(*Buffer).Read", "golang.org/x/net/http2.(*pipe).Read",
			"golang.org/x/net/http2.transportResponseBody.Read", "k8s.io/apimachinery/pkg/util/framer.(*lengthDelimitedFrameReader).Read",
			"k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive",
		}, Transport},
		{"TLS record decryption", []string{
			"crypto/internal/fips140/aes/gcm.gcmAesDec", "crypto/tls.(*Conn).readRecordOrCCS", "golang.org/x/net/http2.(*Framer).ReadFrame",
			"golang.org/x/net/http2.(*clientConnReadLoop).run",
		}, Transport},
		{"read syscall", []string{"internal/runtime/syscall/linux.Syscall6", "syscall.Syscall", "internal/poll.(*FD).Read", "net.(*conn).Read"}, Transport},
		{"bundled HTTP/2", []string{"net/http.(*http2Framer).ReadFrame", "net/http.(*http2clientConnReadLoop).run"}, Transport},
		{"protobuf", []string{
			"runtime.mallocgc", "k8s.io/api/core/v1.(*ConfigMap).Unmarshal", "k8s.io/apimachinery/pkg/runtime/serializer/protobuf.unmarshalToObject",
			"k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive",
		}, Decoding},
		{"JSON", []string{"sigs.k8s.io/json/internal/golang/encoding/json.(*decodeState).object", "k8s.io/apimachinery/pkg/runtime/serializer/json.(*Serializer).Decode"}, Decoding},
		{"decoder hands the event over", []string{
			"runtime.futex", "runtime.futexwakeup", "runtime.notewakeup", "runtime.startm", "runtime.wakep", "runtime.ready",
			"runtime.goready", "runtime.send", "runtime.chansend", "k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive",
		}, Scheduling},
		{"queue wakes a worker", []string{
			"runtime.futex", "runtime.futexwakeup", "runtime.wakep", "runtime.readyWithTime", "sync.(*Cond).Signal",
			"k8s.io/client-go/util/workqueue.(*Typed[...]).Add", "github.com/typedctrl/ctrl/internal/workq.(*Queue[...]).Add",
		}, Scheduling},
		{"idle thread", []string{"runtime.futex", "runtime.futexsleep", "runtime.notesleep", "runtime.stopm", "runtime.findRunnable", "runtime.schedule", "runtime.park_m", "runtime.mcall"}, Scheduling},
		{"mark assist inside decoding", []string{
			"runtime.scanobject", "runtime.gcDrainN", "runtime.gcAssistAlloc1", "runtime.gcAssistAlloc", "runtime.mallocgc",
			"k8s.io/api/core/v1.(*ConfigMap).Unmarshal",
		}, GC},
		{"background mark", []string{"internal/runtime/gc/scan.scanSpanPackedAVX512", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, GC},
		{"sweep on allocation", []string{"runtime.(*sweepLocked).sweep", "runtime.(*mcentral).cacheSpan", "runtime.mallocgc", "github.com/typedctrl/ctrl.(*Cache[...]).Get"}, GC},
		{"ctrl's store", []string{"runtime.mapassign", "github.com/typedctrl/ctrl.(*feed[...]).Update", "k8s.io/client-go/tools/cache.(*Reflector).watch"}, Library},
		{"deep copy in the worker", []string{"runtime.mallocgc", "k8s.io/api/core/v1.(*ConfigMap).DeepCopyInto", "github.com/typedctrl/ctrl.(*Controller[...]).reconcileKey"}, Library},
		{"informer", []string{"k8s.io/client-go/tools/cache.(*processorListener).pop"}, Library},
		{"controller-runtime", []string{"sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).reconcileHandler"}, Library},
		{"raw's loop", []string{"github.com/typedctrl/ctrl/bench/internal/rawctl.(*Controller).processNext"}, Library},
		{"harness alone is not a library", []string{"github.com/typedctrl/ctrl/bench/internal/harness.(*Recorder).Observe"}, Other},
		{"profiler compressing its profile", []string{"compress/flate.(*compressor).deflate", "compress/gzip.(*Writer).Write", "runtime/pprof.profileWriter"}, Other},
		{"empty", nil, Other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.stack); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOf(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	flate, gz := fn(1, "compress/flate.(*decompressor).Read"), fn(2, "golang.org/x/net/http2.(*gzipReader).Read")
	add, ctrlq := fn(3, "k8s.io/client-go/util/workqueue.(*Typed[...]).Add"), fn(4, "github.com/typedctrl/ctrl/internal/workq.(*Queue[...]).Add")
	// The gzip read is inlined into its caller: one location, two lines.
	l1 := &profile.Location{ID: 1, Line: []profile.Line{{Function: flate}, {Function: gz}}}
	l2 := &profile.Location{ID: 2, Line: []profile.Line{{Function: add}}}
	l3 := &profile.Location{ID: 3, Line: []profile.Line{{Function: ctrlq}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1}, Value: []int64{3, 30e6}},
			{Location: []*profile.Location{l2, l3}, Value: []int64{1, 10e6}},
		},
		Location: []*profile.Location{l1, l2, l3},
		Function: []*profile.Function{flate, gz, add, ctrlq},
		Period:   10e6,
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	parsed, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Of(parsed)
	if err != nil {
		t.Fatal(err)
	}
	if b[Decompression] != 30e6 || b[Library] != 10e6 || b.Total() != 40e6 {
		t.Errorf("got %v, want 30 ms decompression and 10 ms library", b)
	}
	if got := b.Share(Decompression); got != 0.75 {
		t.Errorf("got share %v, want 0.75", got)
	}
}
