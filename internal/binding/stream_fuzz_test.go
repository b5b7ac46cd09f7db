package binding

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// FuzzStream reads any bytes as a watch of Pods, in reads of any size: it
// must not panic or loop, each event it returns holds a Pod (a Status for
// an ERROR), and where client-go's decoder reads a Pod from the first
// frame, the Stream reads the same Pod (unless the envelope names a content
// encoding: client-go ignores it, the Stream refuses it).
func FuzzStream(f *testing.F) {
	pod := testPod(1)
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	gone := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	for _, wire := range [][]byte{
		frame(f, watch.Added, pod),
		append(frame(f, watch.Modified, &corev1.Pod{}), frame(f, watch.Bookmark, bookmark)...),
		frame(f, watch.Error, gone),
		frame(f, watch.Added, testConfigMap(1)),
		frame(f, watch.Deleted, gone),
		[]byte(`{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}` + "\n"),
		{0, 0, 0, 3, 0xff, 0xff, 0xff},
		{0x7f, 0, 0, 0},
	} {
		f.Add(wire, uint8(0))
		f.Add(wire, uint8(3))
	}
	f.Fuzz(func(t *testing.T, wire []byte, chunk uint8) {
		s := newStream(io.NopCloser(&chunky{bytes.NewReader(wire), 1 + int(chunk)}), testCodecs.WithoutConversion(),
			corev1.SchemeGroupVersion.WithKind("Pod"), protoDecoder[*corev1.Pod](nil))
		var first watch.Event
		var firstErr error
		for i := 0; ; i++ {
			if i > len(wire) {
				t.Fatalf("%d events from %d bytes: the stream does not end", i, len(wire))
			}
			ev, err := s.Next()
			if i == 0 {
				first, firstErr = ev, err
			}
			if err != nil {
				if errors.Is(err, io.EOF) && err != io.EOF {
					t.Fatalf("a wrapped io.EOF: %v", err)
				}
				break
			}
			switch o := ev.Object.(type) {
			case *corev1.Pod:
				if ev.Type == watch.Error {
					t.Fatalf("an ERROR event with a Pod")
				}
			case *metav1.Status:
				if ev.Type != watch.Error {
					t.Fatalf("a %s event with a Status", ev.Type)
				}
			default:
				t.Fatalf("a %s event with %T", ev.Type, o)
			}
		}
		if len(wire) == 0 || wire[0] == '{' {
			return // JSON: client-go's decoder itself
		}
		typ, want, err := clientGoDecoder(bytes.NewReader(wire)).Decode()
		if err != nil || (typ != watch.Added && typ != watch.Modified && typ != watch.Deleted) {
			return
		}
		if _, ok := want.(*corev1.Pod); !ok {
			return
		}
		if firstErr != nil && strings.Contains(firstErr.Error(), "protobuf object with content encoding") {
			return // client-go ignores the encoding, which no server sets; the Stream refuses to guess
		}
		if firstErr != nil || first.Type != typ || !apiequality.Semantic.DeepEqual(first.Object, want) {
			t.Fatalf("client-go read %s %+v; the Stream %s %+v, %v", typ, want, first.Type, first.Object, firstErr)
		}
	})
}
