package binding

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/utils/ptr"
)

// The wire as the API server writes it: each object through the protobuf
// serializer ("k8s\x00" and a runtime.Unknown), each watch event a
// metav1.WatchEvent through the raw serializer, framed by its length.

var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	metav1.AddMetaToScheme(s)
	s.AddKnownTypes(metav1.SchemeGroupVersion, &metav1.PartialObjectMetadata{}, &metav1.Status{})
	return s
}()

var testCodecs = serializer.NewCodecFactory(testScheme)

func encodeObject(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := testCodecs.WithoutConversion().EncoderForVersion(protobuf.NewSerializer(testScheme, testScheme), nil)
	if err := enc.Encode(obj.DeepCopyObject(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func frame(t testing.TB, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	ev := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: encodeObject(t, obj)}}
	data, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(data))), data...)
}

// testPod is a Pod as a Deployment's ReplicaSet makes it, several KiB,
// with the managedFields the API server records for its creation.
func testPod(i int) *corev1.Pod {
	app := fmt.Sprintf("svc-%03d", i%200)
	env := func(prefix string, n int) []corev1.EnvVar {
		out := []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}}
		for k := range n {
			out = append(out, corev1.EnvVar{Name: fmt.Sprintf("%s_SETTING_%02d", prefix, k), Value: fmt.Sprintf("value-%s-%d-abcdefghijklmnop", app, k)})
		}
		return out
	}
	res := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
		}
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
	mounts := []corev1.VolumeMount{{Name: "config", MountPath: "/etc/" + app, ReadOnly: true}, {Name: "cache", MountPath: "/var/cache/" + app}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("pod-%06d", i), Namespace: "scale", UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(1000 + i), Generation: 1, CreationTimestamp: metav1.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			Labels:          map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "ctrl-bench", "pod-template-hash": "5d4f8b9c7"},
			Annotations:     map[string]string{"bench/round": "3", "prometheus.io/scrape": "true", "checksum/config": strings.Repeat("ab", 32)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-5d4f8b9c7", UID: "rs-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Finalizers:      []string{"example.com/cleanup"},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate", Image: "registry.example.com/" + app + "/migrate:1.24.3", Command: []string{"/bin/migrate", "--wait"}, Env: env("MIGRATE", 3), Resources: res("100m", "64Mi"), VolumeMounts: mounts[:1]}},
			Containers: []corev1.Container{
				{Name: "server", Image: "registry.example.com/" + app + "/server:1.24.3", Args: []string{"--listen=:8080", "--log-level=info"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
					Env:   env("APP", 10), Resources: res("500m", "512Mi"), LivenessProbe: probe, ReadinessProbe: probe, VolumeMounts: mounts,
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
				{Name: "proxy", Image: "registry.example.com/mesh/proxy:1.21.0", Env: env("PROXY", 5), Resources: res("100m", "128Mi"), VolumeMounts: mounts[1:]},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}}},
			},
			NodeName:                      fmt.Sprintf("node-%03d", i%50),
			ServiceAccountName:            app,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Tolerations:                   []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Date(2026, 11, 30, 12, 0, 1, 0, time.UTC)},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Date(2026, 11, 30, 12, 0, 9, 0, time.UTC)},
			},
			PodIP: "10.0.3.7", QOSClass: corev1.PodQOSBurstable,
		},
	}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: ptr.To(metav1.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: fieldsV1(pod.ObjectMeta, pod.Spec)},
	}, {
		Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Subresource: "status",
		Time: ptr.To(metav1.Date(2026, 11, 30, 12, 0, 9, 0, time.UTC)), FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: fieldsV1(nil, pod.Status)},
	}}
	return pod
}

// fieldsV1 approximates the field set the server records for what was
// written: every field that is set, lists of named items by name.
func fieldsV1(meta any, body any) []byte {
	var conv func(v any) any
	conv = func(v any) any {
		out := map[string]any{}
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				out["f:"+k] = conv(e)
			}
		case []any:
			for _, e := range v {
				key := "."
				if m, ok := e.(map[string]any); ok && m["name"] != nil {
					key = fmt.Sprintf(`k:{"name":%q}`, m["name"])
				}
				out[key] = conv(e)
			}
		}
		return out
	}
	toMap := func(v any) any {
		data, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(data, &m)
		return m
	}
	m := map[string]any{}
	if meta != nil {
		m["f:metadata"] = conv(toMap(meta))
	}
	m["f:spec"] = conv(toMap(body))
	data, _ := json.Marshal(m)
	return data
}

func testConfigMap(i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%06d", i), Namespace: "bench", UID: "cm-uid", ResourceVersion: "77",
			Annotations: map[string]string{"bench/round": "2"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "writer", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:payload":{}},"f:metadata":{"f:annotations":{".":{},"f:bench/round":{}}}}`)}}}},
		Data:       map[string]string{"payload": strings.Repeat("x", 1024)},
		BinaryData: map[string][]byte{"bin": {0, 1, 2}},
	}
}

// decodeWith filters the protobuf of obj with fs and decodes it into a
// new object of obj's type.
func decodeWith(t testing.TB, obj runtime.Object, fs *fieldset) runtime.Object {
	t.Helper()
	e, err := unwrap(encodeObject(t, obj))
	if err != nil {
		t.Fatal(err)
	}
	raw := e.raw
	if fs != nil {
		if raw, err = fs.filter(nil, e.raw); err != nil {
			t.Fatal(err)
		}
	}
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
	if err := out.(protoUnmarshaler).Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFilterKeepsExactlyWhatItKeeps decodes real objects through field
// sets and compares them with the generated Unmarshal of the whole object,
// cut down by hand to what each set keeps.
func TestFilterKeepsExactlyWhatItKeeps(t *testing.T) {
	pod, cm := testPod(7), testConfigMap(3)
	noManaged := func(m metav1.ObjectMeta) metav1.ObjectMeta { m.ManagedFields = nil; return m }
	tests := []struct {
		name        string
		obj         runtime.Object
		paths       []string
		keepManaged bool
		want        runtime.Object
	}{
		{"pod whole", pod, nil, true, pod},
		{"pod without managedFields", pod, nil, false, &corev1.Pod{ObjectMeta: noManaged(pod.ObjectMeta), Spec: pod.Spec, Status: pod.Status}},
		{"pod projected", pod, []string{"spec.nodeName", "status.phase", "status.conditions"}, false,
			&corev1.Pod{ObjectMeta: noManaged(pod.ObjectMeta), Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName},
				Status: corev1.PodStatus{Phase: pod.Status.Phase, Conditions: pod.Status.Conditions}}},
		{"pod projected with managedFields", pod, []string{"status.podIP"}, true,
			&corev1.Pod{ObjectMeta: pod.ObjectMeta, Status: corev1.PodStatus{PodIP: pod.Status.PodIP}}},
		{"pod deep paths", pod, []string{"spec.containers.image", "spec.containers.name", "spec.volumes.configMap.name", "spec.terminationGracePeriodSeconds"}, false,
			&corev1.Pod{ObjectMeta: noManaged(pod.ObjectMeta), Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "server", Image: pod.Spec.Containers[0].Image}, {Name: "proxy", Image: pod.Spec.Containers[1].Image}},
				Volumes: []corev1.Volume{{VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "svc-007-config"}}}},
					{}},
				TerminationGracePeriodSeconds: pod.Spec.TerminationGracePeriodSeconds,
			}}},
		{"pod whole section and part of it", pod, []string{"status", "status.phase"}, false, &corev1.Pod{ObjectMeta: noManaged(pod.ObjectMeta), Status: pod.Status}},
		{"pod metadata only", pod, []string{}, false, &corev1.Pod{ObjectMeta: noManaged(pod.ObjectMeta), Spec: pod.Spec, Status: pod.Status}},
		{"configmap without managedFields", cm, nil, false, &corev1.ConfigMap{ObjectMeta: noManaged(cm.ObjectMeta), Data: cm.Data, BinaryData: cm.BinaryData}},
		{"configmap data only", cm, []string{"data"}, false, &corev1.ConfigMap{ObjectMeta: noManaged(cm.ObjectMeta), Data: cm.Data}},
		{"metadata without managedFields", &metav1.PartialObjectMetadata{ObjectMeta: pod.ObjectMeta}, nil, false, &metav1.PartialObjectMetadata{ObjectMeta: noManaged(pod.ObjectMeta)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := fieldsetFor(reflect.TypeOf(tt.obj), tt.paths, tt.keepManaged)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeWith(t, tt.obj, fs)
			// What the generated code decodes of the object cut down by hand.
			want := decodeWith(t, tt.want, nil)
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("decoded:\n%+v\nwant:\n%+v", got, want)
			}
		})
	}
}

func TestFieldsetForRefusesUnknownPaths(t *testing.T) {
	for _, path := range []string{"kind", "spec.noSuchField", "spec.nodeName.x", "metadata.labels", "nope", "spec.nodeSelector.os"} {
		if _, err := fieldsetFor(reflect.TypeFor[*corev1.Pod](), []string{path}, false); err == nil {
			t.Errorf("%q: got no error", path)
		}
	}
	if fs, err := fieldsetFor(reflect.TypeFor[*corev1.Pod](), nil, true); fs != nil || err != nil {
		t.Errorf("everything: got %v, %v, want nil, nil", fs, err)
	}
}

// TestFilterLongLengths keeps part of a message longer than 127 bytes
// and of one longer than 16 KiB, whose lengths take more bytes than the
// one the filter reserves.
func TestFilterLongLengths(t *testing.T) {
	for _, n := range []int{100, 127, 128, 200, 16383, 16384, 70000} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"big": strings.Repeat("a", n)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
		fs, _ := fieldsetFor(reflect.TypeOf(pod), nil, false)
		got := decodeWith(t, pod, fs).(*corev1.Pod)
		if len(got.Annotations["big"]) != n || got.Name != "p" || got.ManagedFields != nil {
			t.Errorf("%d: got annotation of %d bytes, name %q, managedFields %v", n, len(got.Annotations["big"]), got.Name, got.ManagedFields)
		}
	}
}

// FuzzFilter feeds arbitrary bytes to the filter: it never panics, and
// whatever the generated Unmarshal decodes whole, it decodes filtered to
// the same metadata, spec.nodeName and status.
func FuzzFilter(f *testing.F) {
	for _, obj := range []runtime.Object{testPod(1), testPod(2), &corev1.Pod{}} {
		e, err := unwrap(encodeObject(f, obj))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(e.raw)
	}
	f.Add([]byte("C$")) // a group, unknown to every Kubernetes type, which Unmarshal skips
	fs, err := fieldsetFor(reflect.TypeFor[*corev1.Pod](), []string{"spec.nodeName", "status"}, false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var whole corev1.Pod
		if err := whole.Unmarshal(data); err != nil {
			fs.filter(nil, data) // may fail; must not panic
			return
		}
		filtered, err := fs.filter(nil, data)
		if err != nil {
			t.Fatalf("filter of a valid Pod: %v", err)
		}
		var got corev1.Pod
		if err := got.Unmarshal(filtered); err != nil {
			t.Fatalf("Unmarshal of a filtered valid Pod: %v", err)
		}
		whole.ManagedFields = nil
		want := corev1.Pod{ObjectMeta: whole.ObjectMeta, Spec: corev1.PodSpec{NodeName: whole.Spec.NodeName}, Status: whole.Status}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("filtered:\n%+v\nwant:\n%+v", got, want)
		}
	})
}

// clientGoDecoder decodes a watch stream as client-go's REST client does.
func clientGoDecoder(r io.Reader) *restclientwatch.Decoder {
	frames := streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(io.NopCloser(r)), protobuf.NewRawSerializer(testScheme, testScheme))
	return restclientwatch.NewDecoder(frames, testCodecs.WithoutConversion().DecoderToVersion(protobuf.NewSerializer(testScheme, testScheme), nil))
}

// chunky returns at most n bytes per Read, as a connection may.
type chunky struct {
	r io.Reader
	n int
}

func (c *chunky) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestStreamDecodesAsClientGo reads the same stream with a Stream and with
// client-go's decoder: every event, bookmark and error, in order, equal.
func TestStreamDecodesAsClientGo(t *testing.T) {
	big := testPod(9)
	big.Annotations["big"] = strings.Repeat("b", 100<<10) // larger than the Stream's first buffer
	events := []watch.Event{
		{Type: watch.Added, Object: testPod(1)},
		{Type: watch.Modified, Object: testPod(2)},
		{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1234", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}},
		{Type: watch.Modified, Object: big},
		{Type: watch.Deleted, Object: testPod(3)},
		{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (2)"}},
	}
	var wire []byte
	for _, ev := range events {
		wire = append(wire, frame(t, ev.Type, ev.Object)...)
	}
	for _, chunk := range []int{1, 3, 4096, 1 << 20} {
		t.Run(fmt.Sprintf("reads of %d bytes", chunk), func(t *testing.T) {
			cg := clientGoDecoder(bytes.NewReader(wire))
			s := newStream(io.NopCloser(&chunky{bytes.NewReader(wire), chunk}), testCodecs.WithoutConversion(), corev1.SchemeGroupVersion.WithKind("Pod"), protoDecoder[*corev1.Pod](nil))
			for i := range events {
				typ, want, err := cg.Decode()
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Next()
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if got.Type != typ {
					t.Errorf("event %d: type %s, want %s", i, got.Type, typ)
				}
				if typ == watch.Bookmark { // only the resourceVersion and annotations count
					wantPod := want.(*corev1.Pod)
					want = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: wantPod.ResourceVersion, Annotations: wantPod.Annotations}}
				}
				if !apiequality.Semantic.DeepEqual(got.Object, want) {
					t.Errorf("event %d (%s):\n%+v\nwant:\n%+v", i, typ, got.Object, want)
				}
			}
			if _, err := s.Next(); err != io.EOF {
				t.Errorf("after the last event: got %v, want io.EOF", err)
			}
		})
	}
}

// TestStreamRefusesOtherTypes checks each event's apiVersion and kind, as
// client-go's reflector checks each event's type: an object of another
// kind, or a Status where an object belongs, is the watch's error, not an
// object decoded as nonsense or an event with no object.
func TestStreamRefusesOtherTypes(t *testing.T) {
	for _, tt := range []struct {
		name string
		ev   watch.Event
		want string
	}{
		{"another kind", watch.Event{Type: watch.Added, Object: testConfigMap(1)},
			`a ADDED event of apiVersion "v1", kind "ConfigMap" in a watch of apiVersion "v1", kind "Pod"`},
		{"a Status", watch.Event{Type: watch.Modified, Object: &metav1.Status{Status: metav1.StatusFailure, Message: "x"}},
			`a MODIFIED event of apiVersion "v1", kind "Status" in a watch of apiVersion "v1", kind "Pod"`},
		{"a bookmark of another kind", watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5"}}},
			`a BOOKMARK event of apiVersion "v1", kind "ConfigMap"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wire := append(frame(t, watch.Added, testPod(1)), frame(t, tt.ev.Type, tt.ev.Object)...)
			s := newStream(io.NopCloser(bytes.NewReader(wire)), testCodecs.WithoutConversion(), corev1.SchemeGroupVersion.WithKind("Pod"), protoDecoder[*corev1.Pod](nil))
			if ev, err := s.Next(); err != nil || ev.Type != watch.Added {
				t.Fatalf("the first event: got %v %v, want the Pod", ev.Type, err)
			}
			ev, err := s.Next()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v %T, error %v; want an error containing %q", ev.Type, ev.Object, err, tt.want)
			}
		})
	}
}

func TestStreamEnds(t *testing.T) {
	one := frame(t, watch.Added, testConfigMap(1))
	tests := []struct {
		name    string
		wire    []byte
		err     error // of the read after the data
		wantErr string
	}{
		{"end between frames", one, io.EOF, "EOF"},
		{"end within a frame", one[:len(one)-3], io.EOF, "EOF"},
		{"end within a length", append(one, 0, 0), io.EOF, "EOF"},
		{"connection lost", one, fmt.Errorf("http2: client connection lost"), "unable to decode an event from the watch stream: http2: client connection lost"},
		{"garbage", append(one, 0, 0, 0, 3, 0xff, 0xff, 0xff), io.EOF, "unable to decode an event from the watch stream"},
		{"too large", append(one, 0x7f, 0, 0, 0), io.EOF, "exceeds the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStream(io.NopCloser(io.MultiReader(bytes.NewReader(tt.wire), failingReader{tt.err})), testCodecs.WithoutConversion(), corev1.SchemeGroupVersion.WithKind("ConfigMap"), protoDecoder[*corev1.ConfigMap](nil))
			if len(tt.wire) >= len(one) {
				if ev, err := s.Next(); err != nil || ev.Type != watch.Added {
					t.Fatalf("first event: %v, %v", ev.Type, err)
				}
			}
			_, err := s.Next()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// TestStreamJSON reads a JSON watch stream, as a custom resource's.
func TestStreamJSON(t *testing.T) {
	var buf bytes.Buffer
	enc := testCodecs.LegacyCodec(corev1.SchemeGroupVersion)
	for _, typ := range []watch.EventType{watch.Added, watch.Modified} {
		var obj bytes.Buffer
		if err := enc.Encode(testConfigMap(1), &obj); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj.Bytes()}})
		buf.Write(append(data, '\n'))
	}
	s := newStream(io.NopCloser(&buf), testCodecs.WithoutConversion(), corev1.SchemeGroupVersion.WithKind("ConfigMap"), protoDecoder[*corev1.ConfigMap](nil))
	for _, typ := range []watch.EventType{watch.Added, watch.Modified} {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		want := testConfigMap(1)
		if ev.Type != typ || !apiequality.Semantic.DeepEqual(ev.Object, want) {
			t.Errorf("got %s %+v, want %s %+v", ev.Type, ev.Object, typ, want)
		}
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("at the end: got %v, want io.EOF", err)
	}
}

// TestStreamResultChan reads a Stream as a watch.Interface.
func TestStreamResultChan(t *testing.T) {
	wire := append(frame(t, watch.Added, testConfigMap(1)), 0, 0, 0, 3, 0xff, 0xff, 0xff)
	s := newStream(io.NopCloser(bytes.NewReader(wire)), testCodecs.WithoutConversion(), corev1.SchemeGroupVersion.WithKind("ConfigMap"), protoDecoder[*corev1.ConfigMap](nil))
	var got []watch.EventType
	for ev := range s.ResultChan() {
		got = append(got, ev.Type)
	}
	if want := []watch.EventType{watch.Added, watch.Error}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestProjectingDecoder decodes a stream of Pods into a projection with a
// scratch Pod: each projection is its own, whatever came before.
func TestProjectingDecoder(t *testing.T) {
	type view struct{ node, phase, round string }
	fs, err := fieldsetFor(reflect.TypeFor[*corev1.Pod](), []string{"spec.nodeName", "status.phase"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var views []view
	dec := projectingDecoder(fs, func(p *corev1.Pod) *corev1.Pod {
		views = append(views, view{p.Spec.NodeName, string(p.Status.Phase), p.Annotations["bench/round"]})
		if len(p.Spec.Containers) > 0 || len(p.ManagedFields) > 0 {
			t.Errorf("the projection sees fields it did not ask for")
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: maps.Clone(p.Labels)}}
	})
	p1, p2 := testPod(1), testPod(2)
	p2.Spec.NodeName, p2.Status.Phase, p2.Annotations = "", "", nil
	for _, p := range []*corev1.Pod{p1, p2} {
		e, err := unwrap(encodeObject(t, p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dec(e.raw); err != nil {
			t.Fatal(err)
		}
	}
	want := []view{{p1.Spec.NodeName, "Running", "3"}, {"", "", ""}}
	if !reflect.DeepEqual(views, want) {
		t.Errorf("projected %v, want %v", views, want)
	}
}

// TestProjectionCheck projects the first object of a watch twice, from
// the fields named and from the whole object: a function that reads a
// field it does not name is reported, once; one that names what it reads
// is not.
func TestProjectionCheck(t *testing.T) {
	podType := reflect.TypeFor[*corev1.Pod]()
	whole, _ := fieldsetFor(podType, nil, false)
	node := func(p *corev1.Pod) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}}
	}
	var raws [][]byte
	for i := range 2 {
		e, err := unwrap(encodeObject(t, testPod(i)))
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, e.raw)
	}
	for _, tt := range []struct {
		name    string
		fields  []string
		reports int
	}{
		{"named", []string{"spec.nodeName"}, 0},
		{"not named", []string{"status.phase"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := fieldsetFor(podType, tt.fields, false)
			if err != nil {
				t.Fatal(err)
			}
			var reports []error
			dec := checkedOnce(projectingDecoder(fs, node), protoDecoder[*corev1.Pod](whole), node, func(err error) { reports = append(reports, err) })
			for _, raw := range raws {
				if _, err := dec(raw); err != nil {
					t.Fatal(err)
				}
			}
			if len(reports) != tt.reports {
				t.Fatalf("%d reports, want %d: %v", len(reports), tt.reports, reports)
			}
			if tt.reports > 0 && !strings.Contains(reports[0].Error(), "reads fields its Project call does not name: for scale/pod-000000") {
				t.Errorf("report: %v", reports[0])
			}
		})
	}
}
