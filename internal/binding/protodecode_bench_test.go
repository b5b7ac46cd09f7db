package binding

import (
	"io"
	"maps"
	"reflect"
	goruntime "runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// loop reads the same bytes over and over: a watch stream that never ends.
type loop struct {
	data []byte
	off  int
}

func (l *loop) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

// cpuTime is the process's user and system CPU time in nanoseconds: on a
// shared machine, steadier than the time per op, which counts the waits
// for a CPU. It includes the collector's work on other threads.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchView is what a controller of Pods typically reads, as the scale
// benchmark's projection.
type benchView struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Phase corev1.PodPhase
	Node  string
	Ready bool
	Round int32
}

func (v *benchView) DeepCopyObject() runtime.Object { out := *v; return &out }

func project(pod *corev1.Pod) *benchView {
	r, _ := strconv.Atoi(pod.Annotations["bench/round"])
	v := &benchView{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, Labels: maps.Clone(pod.Labels)},
		Phase: pod.Status.Phase, Node: pod.Spec.NodeName, Round: int32(r),
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			v.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return v
}

// BenchmarkDecodePodEvent decodes one watch event of a 5 KiB Pod with its
// managedFields (one op), framed as the API server frames it:
//
//   - client-go: client-go's watch decoder (what a reflector reads through
//     its StreamWatcher), whole Pod;
//   - client-go-project: the same, then the projection, as ctrl did;
//   - whole: a Stream keeping everything;
//   - no-managed: a Stream without managedFields (a cache's default);
//   - project-whole: a Stream decoding the Pod without managedFields into a
//     reused Pod, then the projection (Project without fields);
//   - project: the same, decoding only the fields the projection reads;
//   - meta-client-go, meta: a metadata-only watch's event
//     (PartialObjectMetadata), by client-go's decoder and by a Stream
//     without managedFields.
func BenchmarkDecodePodEvent(b *testing.B) {
	pod := testPod(1)
	podWire := frame(b, watch.Modified, pod)
	metaWire := frame(b, watch.Modified, &metav1.PartialObjectMetadata{ObjectMeta: pod.ObjectMeta})
	b.Logf("event: Pod %d bytes, metadata %d bytes", len(podWire), len(metaWire))
	fields := []string{"spec.nodeName", "status.phase", "status.conditions"}
	fsFor := func(t reflect.Type, paths []string, keepManaged bool) *fieldset {
		fs, err := fieldsetFor(t, paths, keepManaged)
		if err != nil {
			b.Fatal(err)
		}
		return fs
	}
	clientGo := func(wire []byte, then func(runtime.Object)) func(b *testing.B) {
		return func(b *testing.B) {
			d := clientGoDecoder(&loop{data: wire})
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				_, obj, err := d.Decode()
				if err != nil {
					b.Fatal(err)
				}
				then(obj)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		}
	}
	stream := func(wire []byte, next func() (watch.Event, error)) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := next(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		}
	}
	codec := testCodecs.WithoutConversion()
	podType := reflect.TypeFor[*corev1.Pod]()
	podGVK, metaGVK := corev1.SchemeGroupVersion.WithKind("Pod"), metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")
	b.Run("client-go", clientGo(podWire, func(runtime.Object) {}))
	b.Run("client-go-project", clientGo(podWire, func(o runtime.Object) { project(o.(*corev1.Pod)) }))
	b.Run("whole", stream(podWire, newStream(io.NopCloser(&loop{data: podWire}), codec, podGVK, protoDecoder[*corev1.Pod](nil)).Next))
	b.Run("no-managed", stream(podWire, newStream(io.NopCloser(&loop{data: podWire}), codec, podGVK, protoDecoder[*corev1.Pod](fsFor(podType, nil, false))).Next))
	b.Run("project-whole", stream(podWire, newStream(io.NopCloser(&loop{data: podWire}), codec, podGVK, projectingDecoder(fsFor(podType, nil, false), project)).Next))
	b.Run("project", stream(podWire, newStream(io.NopCloser(&loop{data: podWire}), codec, podGVK, projectingDecoder(fsFor(podType, fields, false), project)).Next))
	b.Run("meta-client-go", clientGo(metaWire, func(runtime.Object) {}))
	b.Run("meta", stream(metaWire, newStream(io.NopCloser(&loop{data: metaWire}), codec, metaGVK, protoDecoder[*metav1.PartialObjectMetadata](fsFor(metadataType, nil, false))).Next))
}

// BenchmarkReconcileCopy measures the ways a reconcile could get an object
// of its own from the cache (one op is one object), for a Pod and a
// ConfigMap of 1 KiB of data without managedFields, as a cache holds them:
//
//   - deepcopy: the generated DeepCopyObject (what ctrl does);
//   - pooled: DeepCopyInto an object taken from a sync.Pool and put back
//     after use (only the outer struct is reused: DeepCopyInto allocates
//     every map and slice anew);
//   - decode: Unmarshal of the object's protobuf, as if the cache kept it.
func BenchmarkReconcileCopy(b *testing.B) {
	pod, cm := testPod(1), testConfigMap(1)
	pod.ManagedFields, cm.ManagedFields = nil, nil
	benchCopy(b, "pod", pod)
	benchCopy(b, "configmap", cm)
}

func benchCopy[T interface {
	Object
	protoUnmarshaler
	DeepCopyInto(T)
	Reset()
}](b *testing.B, name string, obj T) {
	e, err := unwrap(encodeObject(b, obj))
	if err != nil {
		b.Fatal(err)
	}
	var sink T
	b.Run(name+"/deepcopy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = obj.DeepCopyObject().(T)
		}
	})
	pool := sync.Pool{New: func() any { return New[T]() }}
	b.Run(name+"/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := pool.Get().(T)
			obj.DeepCopyInto(c)
			sink = c
			pool.Put(c)
		}
	})
	b.Run(name+"/decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := New[T]()
			if err := c.Unmarshal(e.raw); err != nil {
				b.Fatal(err)
			}
			sink = c
		}
	})
	_ = sink
}

// BenchmarkCopyFragmentation measures what a reconcile's copy costs the
// heap that stays in use once the copies are garbage: a model of a cache of
// 20000 ConfigMaps of 1 KiB of data, each replaced three times by a newly
// decoded object, as a watch delivers updates, with each update's reconcile
// given an object of its own as below. One op is one whole model; run it
// with -benchtime 1x. It reports runtime.MemStats after runtime.GC():
// heap-inuse-MiB (HeapInuse: the spans that hold any live object) and
// live-MiB (HeapAlloc).
//
//   - none: no copy (UnsafeDisableDeepCopy);
//   - deepcopy: the generated DeepCopyObject (what ctrl does);
//   - pooled: DeepCopyInto an outer struct reused from a pool, as a pool of
//     copies released when the reconcile returns would;
//   - reused: one copy whose maps are cleared and refilled: what a pool
//     could at best save, were it safe and the copy written for the type.
//
// The live heap is the same in every variant. The copies are allocated from
// the same size classes as the cached objects they are made of, between
// them, so after a collection many spans still hold a cached object beside
// the free slots of dead copies; only a copy that allocates nothing (reused)
// leaves HeapInuse where none does.
func BenchmarkCopyFragmentation(b *testing.B) {
	const n, rounds = 20000, 3
	var (
		sink   *corev1.ConfigMap
		pool   []*corev1.ConfigMap
		reused *corev1.ConfigMap
	)
	copies := map[string]func(*corev1.ConfigMap){
		"none":     func(*corev1.ConfigMap) {},
		"deepcopy": func(c *corev1.ConfigMap) { sink = c.DeepCopyObject().(*corev1.ConfigMap) },
		"pooled": func(c *corev1.ConfigMap) {
			out := new(corev1.ConfigMap)
			if len(pool) > 0 {
				out, pool = pool[len(pool)-1], pool[:len(pool)-1]
			}
			c.DeepCopyInto(out)
			sink = out
			pool = append(pool, out)
		},
		"reused": func(c *corev1.ConfigMap) {
			if reused == nil {
				reused = c.DeepCopy()
				return
			}
			a, d, bd := reused.Annotations, reused.Data, reused.BinaryData
			*reused = *c
			clear(a)
			clear(d)
			clear(bd)
			maps.Copy(a, c.Annotations)
			maps.Copy(d, c.Data)
			for k, v := range c.BinaryData {
				bd[k] = append([]byte(nil), v...)
			}
			reused.Annotations, reused.Data, reused.BinaryData = a, d, bd
		},
	}
	for _, name := range []string{"none", "deepcopy", "pooled", "reused"} {
		copyOf := copies[name]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				tmpl := testConfigMap(0)
				tmpl.ManagedFields = nil
				var buf []byte
				decode := func(i, round int) *corev1.ConfigMap {
					tmpl.Name = "cm-" + strconv.Itoa(i)
					tmpl.ResourceVersion = strconv.Itoa(round*n + i)
					tmpl.Annotations["bench/round"] = strconv.Itoa(round)
					if size := tmpl.Size(); cap(buf) < size {
						buf = make([]byte, size)
					} else {
						buf = buf[:size]
					}
					if _, err := tmpl.MarshalToSizedBuffer(buf); err != nil {
						b.Fatal(err)
					}
					obj := new(corev1.ConfigMap)
					if err := obj.Unmarshal(buf); err != nil {
						b.Fatal(err)
					}
					return obj
				}
				cache := make(map[string]*corev1.ConfigMap, n)
				for i := range n {
					obj := decode(i, 0)
					cache[obj.Name] = obj
				}
				for round := 1; round <= rounds; round++ {
					for i := range n {
						obj := decode(i, round)
						cache[obj.Name] = obj
						copyOf(obj)
					}
				}
				var ms goruntime.MemStats
				goruntime.GC()
				goruntime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
				b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-MiB")
				goruntime.KeepAlive(cache)
				goruntime.KeepAlive(sink)
				sink, pool, reused = nil, nil, nil
			}
		})
	}
}
