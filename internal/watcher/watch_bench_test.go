package watcher

import (
	"context"
	"encoding/binary"
	"io"
	"sync"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkHandOff measures what the goroutine between the connection and
// the store costs per event, at the rate where it matters: each event
// arrives when the controller is idle, as a server writes them one by one.
// A writer writes one ConfigMap event into a pipe (the connection) and
// waits until the store has it; one op is one event. Both decode with
// client-go's decoder; they differ only in who reads the pipe:
//
//   - client-go: client-go's Reflector over a StreamWatcher, whose goroutine
//     decodes and hands each event to the reflector's over a channel;
//   - direct: this package's reflector reading the events on its own
//     goroutine (what a binding.Stream lets it do).
func BenchmarkHandOff(b *testing.B) {
	for _, impl := range []string{"client-go", "direct"} {
		b.Run(impl, func(b *testing.B) { benchmarkHandOff(b, impl) })
	}
}

func benchmarkHandOff(b *testing.B, impl string) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	ser := protobuf.NewSerializer(scheme, scheme)
	frameOf := func(i int) []byte {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "1"}, Data: map[string]string{"k": "v"}}
		var obj []byte
		buf := &byteWriter{}
		if err := codecs.EncoderForVersion(ser, corev1.SchemeGroupVersion).Encode(cm, buf); err != nil {
			b.Fatal(err)
		}
		obj = buf.b
		ev := metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: obj}}
		data, err := ev.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(data))), data...)
	}
	frame := frameOf(0)
	decoder := func(r io.ReadCloser) *restclientwatch.Decoder {
		frames := streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(r), protobuf.NewRawSerializer(scheme, scheme))
		return restclientwatch.NewDecoder(frames, codecs.DecoderToVersion(ser, nil))
	}

	pr, pw := io.Pipe()
	stored := make(chan struct{})
	store := &signalStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), stored: stored}
	opened := false
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			if opened {
				<-ctx.Done() // one watch only
				return nil, ctx.Err()
			}
			opened = true
			d := decoder(pr)
			if impl == "direct" {
				return decoded{d}, nil
			}
			return watch.NewStreamWatcher(d, nil), nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if impl == "direct" {
			r := newReflector("bench", noWatchList{lw}, store, logr.Discard(), Backoff, 0)
			_ = r.listAndWatch(ctx)
			return
		}
		r := cache.NewReflectorWithOptions(noWatchList{lw}, &corev1.ConfigMap{}, store, cache.ReflectorOptions{})
		_ = r.ListAndWatchWithContext(ctx)
	}()
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := pw.Write(frame); err != nil {
			b.Fatal(err)
		}
		<-stored
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	cancel()
	pw.Close()
	wg.Wait()
}

// cpuTime is the process's user and system CPU time, in nanoseconds: with
// the writer's, of the whole chain of wake-ups.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

type byteWriter struct{ b []byte }

func (w *byteWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// decoded is a watch read on the caller's goroutine, as binding.Stream.
type decoded struct{ d *restclientwatch.Decoder }

func (d decoded) Next() (watch.Event, error) {
	typ, obj, err := d.d.Decode()
	return watch.Event{Type: typ, Object: obj}, err
}
func (d decoded) Stop()                          { d.d.Close() }
func (d decoded) ResultChan() <-chan watch.Event { panic("read with Next") }

// signalStore signals every update it stores.
type signalStore struct {
	cache.Store
	stored chan struct{}
}

func (s *signalStore) Update(obj any) error {
	err := s.Store.Update(obj)
	s.stored <- struct{}{}
	return err
}
