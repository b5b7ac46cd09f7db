package binding

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// Stream is a watch of a real API server whose events are read and decoded
// by the goroutine that calls Next, the one that stores them: no goroutine
// and no channel between the connection and the cache. Protobuf events are
// decoded by the binding's own decoder (protodecode.go), which decodes only
// what the cache keeps; JSON events by client-go's decoder.
//
// A Stream is also a watch.Interface for callers that read a channel: the
// first call to ResultChan starts a goroutine that calls Next, ending the
// channel as client-go's StreamWatcher does.
type Stream[T Object] struct {
	body   io.ReadCloser
	want   schema.GroupVersionKind      // of every object but an ERROR event's Status
	decode func(raw []byte) (T, error)  // a protobuf object, without its envelope
	codec  runtime.NegotiatedSerializer // for JSON streams

	buf        []byte // read from body; frames are slices of it
	start, end int    // the unread bytes of buf
	json       *restclientwatch.Decoder
	started    bool // the first byte told protobuf from JSON

	stopOnce sync.Once
	chOnce   sync.Once
	done     chan struct{}
	ch       chan watch.Event
}

// maxFrame bounds an event, as client-go's streaming decoder does.
const maxFrame = 16 << 20

// newStream reads the watch in body, whose objects are of want (in their
// protobuf envelope), decoding them with decode.
func newStream[T Object](body io.ReadCloser, codec runtime.NegotiatedSerializer, want schema.GroupVersionKind, decode func([]byte) (T, error)) *Stream[T] {
	return &Stream[T]{body: body, codec: codec, want: want, decode: decode, done: make(chan struct{})}
}

// Next returns the next event. It returns io.EOF when the stream ends as a
// watch ends normally (the server closed it, or the connection went away
// as connections do), and another error when it cannot be read or decoded.
// An ERROR event is an event, whose object is a *metav1.Status. Next is not
// safe for concurrent use.
func (s *Stream[T]) Next() (watch.Event, error) {
	ev, err := s.next()
	if err == nil {
		return ev, nil
	}
	select {
	case <-s.done:
		return ev, io.EOF // stopped
	default:
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
		return ev, io.EOF
	}
	return ev, fmt.Errorf("unable to decode an event from the watch stream: %w", err)
}

func (s *Stream[T]) next() (watch.Event, error) {
	if !s.started {
		if err := s.fill(1); err != nil {
			return watch.Event{}, err
		}
		s.started = true
		if s.buf[s.start] == '{' { // a JSON object; a protobuf frame starts with its length
			if err := s.startJSON(); err != nil {
				return watch.Event{}, err
			}
		}
	}
	if s.json != nil {
		typ, obj, err := s.json.Decode()
		return watch.Event{Type: typ, Object: obj}, err
	}
	if err := s.fill(4); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) && s.start == s.end {
			err = io.EOF // between two frames
		}
		return watch.Event{}, err
	}
	n := int(binary.BigEndian.Uint32(s.buf[s.start:]))
	if n > maxFrame {
		return watch.Event{}, fmt.Errorf("watch event of %d bytes exceeds the limit of %d", n, maxFrame)
	}
	if err := s.fill(4 + n); err != nil {
		return watch.Event{}, err
	}
	frame := s.buf[s.start+4 : s.start+4+n]
	s.start += 4 + n
	return s.event(frame)
}

// fill reads until n bytes are unread.
func (s *Stream[T]) fill(n int) error {
	if s.end-s.start >= n {
		return nil
	}
	if s.start == s.end && len(s.buf) > 1<<20 && n <= 32<<10 {
		s.buf, s.start, s.end = nil, 0, 0 // let a large event's buffer go
	}
	if s.start+n > len(s.buf) { // make room: move the unread bytes to the front, grow
		if n > len(s.buf) {
			nb := make([]byte, max(n, 2*len(s.buf), 32<<10))
			copy(nb, s.buf[s.start:s.end])
			s.buf = nb
		} else {
			copy(s.buf, s.buf[s.start:s.end])
		}
		s.end -= s.start
		s.start = 0
	}
	for s.end-s.start < n {
		m, err := s.body.Read(s.buf[s.end:])
		s.end += m
		if err != nil {
			if s.end-s.start >= n {
				return nil
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// event decodes one protobuf watch event.
func (s *Stream[T]) event(frame []byte) (watch.Event, error) {
	typ, data, err := watchEvent(frame)
	if err != nil {
		return watch.Event{}, err
	}
	e, err := unwrap(data)
	if err != nil {
		return watch.Event{}, err
	}
	ev := watch.Event{Type: watch.EventType(typ)}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		// client-go's reflector checks each event's type: the bytes of
		// another kind would decode into T as nonsense.
		if string(e.kind) != s.want.Kind || string(e.apiVersion) != s.want.GroupVersion().String() {
			want, _ := s.want.ToAPIVersionAndKind()
			return ev, fmt.Errorf("a %s event of apiVersion %q, kind %q in a watch of apiVersion %q, kind %q", typ, e.apiVersion, e.kind, want, s.want.Kind)
		}
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		obj, err := s.decode(e.raw)
		if err != nil {
			return ev, fmt.Errorf("unable to decode watch event: %w", err)
		}
		ev.Object = obj
		return ev, nil
	case watch.Bookmark:
		// Only its resourceVersion and annotations mean anything.
		var m metav1.ObjectMeta
		if err := fields(e.raw, func(num uint64, body []byte) error {
			if num == 1 {
				return m.Unmarshal(body)
			}
			return nil
		}); err != nil {
			return ev, fmt.Errorf("unable to decode watch event: %w", err)
		}
		t := New[T]()
		t.SetResourceVersion(m.ResourceVersion)
		t.SetAnnotations(m.Annotations)
		ev.Object = t
		return ev, nil
	case watch.Error:
	default:
		return ev, fmt.Errorf("got invalid watch event type: %v", typ)
	}
	if string(e.kind) != "Status" {
		return ev, fmt.Errorf("unable to decode watch event: a %s where a Status was expected", e.kind)
	}
	st := &metav1.Status{}
	if err := st.Unmarshal(e.raw); err != nil {
		return ev, fmt.Errorf("unable to decode watch event: %w", err)
	}
	ev.Object = st
	return ev, nil
}

// startJSON hands the stream to client-go's JSON decoder.
func (s *Stream[T]) startJSON() error {
	info, ok := runtime.SerializerInfoForMediaType(s.codec.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		return errors.New("the server sent JSON, which the client cannot decode")
	}
	r := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(s.buf[s.start:s.end]), s.body), s.body}
	frames := streaming.NewDecoder(info.StreamSerializer.Framer.NewFrameReader(r), info.StreamSerializer.Serializer)
	s.json = restclientwatch.NewDecoder(frames, s.codec.DecoderToVersion(info.Serializer, nil))
	s.start = s.end
	return nil
}

// Stop ends the stream: a Next blocked in reading returns.
func (s *Stream[T]) Stop() {
	s.stopOnce.Do(func() {
		close(s.done)
		s.body.Close()
	})
}

// ResultChan returns the events on a channel, for callers that want one.
// The channel closes when the stream ends; an error other than the
// stream's normal end is sent first as an ERROR event.
func (s *Stream[T]) ResultChan() <-chan watch.Event {
	s.chOnce.Do(func() {
		s.ch = make(chan watch.Event)
		go s.pump()
	})
	return s.ch
}

func (s *Stream[T]) pump() {
	defer close(s.ch)
	defer s.Stop()
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			ev = watch.Event{Type: watch.Error, Object: apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding").AsObject(err)}
		}
		select {
		case s.ch <- ev:
		case <-s.done:
			return
		}
		if err != nil {
			return
		}
	}
}
