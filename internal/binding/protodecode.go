package binding

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Decoding only what a cache keeps.
//
// The API server sends whole objects. A cache that drops managedFields
// drops the largest part of most objects' metadata, and a projection reads
// a few fields of each. Protobuf fields carry their length, so the fields a
// cache does not keep are skipped without being decoded: a fieldset names
// the fields to decode, filter copies their bytes (re-encoding only the
// lengths of the messages it keeps part of), and the generated Unmarshal
// decodes what is left exactly as it decodes a whole object. What is kept
// is therefore decoded by the same code as always; what is not is never
// allocated.

// fieldset says which fields of one protobuf message to decode.
type fieldset struct {
	// only: decode only the fields whose rule is keep or part; otherwise
	// decode every field but those whose rule is drop.
	only  bool
	rules []fieldRule // by field number
}

type fieldRule struct {
	op   uint8     // opDefault, opKeep, opDrop or opPart
	part *fieldset // for opPart: which fields of the field's message
}

const (
	opDefault = iota
	opKeep
	opDrop
	opPart
)

func (fs *fieldset) rule(num uint64) fieldRule {
	if num < uint64(len(fs.rules)) && fs.rules[num].op != opDefault {
		return fs.rules[num]
	}
	if fs.only {
		return fieldRule{op: opDrop}
	}
	return fieldRule{op: opKeep}
}

func (fs *fieldset) set(num int, r fieldRule) {
	for len(fs.rules) <= num {
		fs.rules = append(fs.rules, fieldRule{})
	}
	fs.rules[num] = r
}

// filter appends to dst the protobuf message src without the fields fs
// does not keep. Runs of kept fields are copied at once; a message kept in
// part is filtered in turn and its length re-encoded.
func (fs *fieldset) filter(dst, src []byte) ([]byte, error) {
	run := 0 // start of the run of kept fields not yet copied
	for i := 0; i < len(src); {
		start := i
		key, n := uvarint(src[i:])
		if n <= 0 {
			return dst, errBadProto
		}
		i += n
		wire := key & 7
		var body []byte // of a length-delimited field
		if wire == 2 {
			size, m := uvarint(src[i:])
			if m <= 0 || size > uint64(len(src)-i-m) {
				return dst, errBadProto
			}
			body = src[i+m : i+m+int(size)]
			i += m + int(size)
		} else if i = skipValue(src, i, wire); i < 0 {
			return dst, errBadProto
		}
		r := fs.rule(key >> 3)
		if r.op == opKeep || (r.op == opPart && wire != 2) {
			continue // in the run; a part of a field that is no message is left to Unmarshal to refuse
		}
		dst = append(dst, src[run:start]...)
		run = i
		if r.op == opDrop {
			continue
		}
		dst = append(dst, src[start:start+n]...) // the key
		mark := len(dst)
		dst = append(dst, 0) // the length, if it fits one byte
		var err error
		if dst, err = r.part.filter(dst, body); err != nil {
			return dst, err
		}
		size := len(dst) - mark - 1
		if size < 0x80 {
			dst[mark] = byte(size)
			continue
		}
		// Make room for a longer length and move the message after it.
		var lb [10]byte
		l := putUvarint(lb[:], uint64(size))
		dst = append(dst, lb[:l-1]...)
		copy(dst[mark+l:], dst[mark+1:mark+1+size])
		copy(dst[mark:], lb[:l])
	}
	return append(dst, src[run:]...), nil
}

// skipValue returns where the value of a field of the given wire type
// that starts at src[i:] ends, or -1. Like the generated code, it skips
// groups, which no Kubernetes type has but a message may carry as unknown
// fields.
func skipValue(src []byte, i int, wire uint64) int {
	depth := 0
	for {
		switch wire {
		case 0:
			_, m := uvarint(src[i:])
			if m <= 0 {
				return -1
			}
			i += m
		case 1:
			i += 8
		case 5:
			i += 4
		case 2:
			size, m := uvarint(src[i:])
			if m <= 0 || size > uint64(len(src)-i-m) {
				return -1
			}
			i += m + int(size)
		case 3:
			depth++
		case 4:
			if depth == 0 {
				return -1
			}
			depth--
		default:
			return -1
		}
		if i > len(src) {
			return -1
		}
		if depth == 0 {
			return i
		}
		key, m := uvarint(src[i:])
		if m <= 0 {
			return -1
		}
		i += m
		wire = key & 7
	}
}

func putUvarint(b []byte, v uint64) int {
	i := 0
	for v >= 0x80 {
		b[i] = byte(v) | 0x80
		v >>= 7
		i++
	}
	b[i] = byte(v)
	return i + 1
}

// objectMetaType is where every Kubernetes object keeps its metadata.
var objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()

// managedFieldsNumber is the field number of metadata.managedFields.
var managedFieldsNumber = func() int {
	f, _ := objectMetaType.FieldByName("ManagedFields")
	n, _, _ := protoTag(f)
	return n
}()

// fieldsetFor returns what to decode of the objects of t (a pointer to a
// generated struct): metadata, without managedFields unless keepManaged,
// and the fields named by paths, as JSON paths ("spec.nodeName",
// "status.conditions"); no paths: every field. It returns nil when that is
// everything.
func fieldsetFor(t reflect.Type, paths []string, keepManaged bool) (*fieldset, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	root := &fieldset{only: len(paths) > 0}
	meta := -1
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == objectMetaType {
			if n, _, ok := protoTag(f); ok {
				meta = n
			}
		}
	}
	if meta < 0 {
		return nil, fmt.Errorf("%s has no metadata field with a protobuf tag", t)
	}
	switch {
	case !keepManaged:
		part := &fieldset{}
		part.set(managedFieldsNumber, fieldRule{op: opDrop})
		root.set(meta, fieldRule{op: opPart, part: part})
	case root.only:
		root.set(meta, fieldRule{op: opKeep})
	}
	for _, p := range paths {
		if err := root.add(t, p); err != nil {
			return nil, err
		}
	}
	if !root.only && len(root.rules) == 0 {
		return nil, nil
	}
	return root, nil
}

// add keeps the field at path of the struct type t in fs.
func (fs *fieldset) add(t reflect.Type, path string) error {
	elems := strings.Split(path, ".")
	for i, name := range elems {
		chain, ok := jsonField(t, name)
		if !ok {
			return fmt.Errorf("field %q of %s: %s has no field %q", path, t, t, name)
		}
		// An inlined struct of its own message (a Volume's VolumeSource) is
		// one more level on the wire.
		for j, f := range chain {
			num, message, ok := protoTag(f)
			if !ok {
				return fmt.Errorf("field %q: %s.%s is not sent as protobuf", path, t, f.Name)
			}
			if f.Type == objectMetaType {
				return fmt.Errorf("field %q: metadata is always decoded", path)
			}
			r := fs.rule(uint64(num))
			if r.op == opKeep && fs.only {
				return nil // already whole
			}
			if i == len(elems)-1 && j == len(chain)-1 {
				fs.set(num, fieldRule{op: opKeep})
				return nil
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if !message || ft.Kind() != reflect.Struct {
				return fmt.Errorf("field %q: %s.%s has no fields", path, t, f.Name)
			}
			if r.op != opPart {
				r = fieldRule{op: opPart, part: &fieldset{only: true}}
				fs.set(num, r)
			}
			fs, t = r.part, ft
		}
	}
	return nil
}

// jsonField finds the field of struct type t that JSON names name, and
// the inlined structs it is in, outermost first.
func jsonField(t reflect.Type, name string) ([]reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return []reflect.StructField{f}, true
		}
		if tag == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			if chain, ok := jsonField(f.Type, name); ok {
				return append([]reflect.StructField{f}, chain...), true
			}
		}
	}
	return nil, false
}

// protoTag returns a field's protobuf number and whether it is a
// length-delimited field ("bytes": a message, a string, bytes, a map or
// packed numbers).
func protoTag(f reflect.StructField) (num int, bytes bool, ok bool) {
	tag := f.Tag.Get("protobuf")
	if tag == "" {
		return 0, false, false
	}
	parts := strings.Split(tag, ",")
	if len(parts) < 2 {
		return 0, false, false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 {
		return 0, false, false
	}
	return n, parts[0] == "bytes", true
}

// The envelopes around an object on the wire.

// protobufPrefix starts every object the API server encodes as protobuf:
// a runtime.Unknown follows.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// envelope is a protobuf object as the API server sends it, unwrapped
// without copying: its apiVersion, kind and encoding.
type envelope struct {
	apiVersion, kind []byte
	raw              []byte // the object's own protobuf
}

// unwrap reads the runtime.Unknown around an object: 1 typeMeta
// (1 apiVersion, 2 kind), 2 raw, 3 contentEncoding, 4 contentType.
func unwrap(data []byte) (envelope, error) {
	var e envelope
	if !bytes.HasPrefix(data, protobufPrefix) {
		return e, errors.New("not a protobuf object: no k8s prefix")
	}
	err := fields(data[len(protobufPrefix):], func(num uint64, body []byte) error {
		switch num {
		case 1:
			return fields(body, func(num uint64, body []byte) error {
				switch num {
				case 1:
					e.apiVersion = body
				case 2:
					e.kind = body
				}
				return nil
			})
		case 2:
			e.raw = body
		case 3:
			if len(body) > 0 {
				return fmt.Errorf("protobuf object with content encoding %q", body)
			}
		}
		return nil
	})
	return e, err
}

// watchEvent reads a metav1.WatchEvent: 1 type, 2 object (a
// runtime.RawExtension: 1 raw).
func watchEvent(frame []byte) (typ, object []byte, err error) {
	err = fields(frame, func(num uint64, body []byte) error {
		switch num {
		case 1:
			typ = body
		case 2:
			return fields(body, func(num uint64, body []byte) error {
				if num == 1 {
					object = body
				}
				return nil
			})
		}
		return nil
	})
	return typ, object, err
}

// fields calls fn with the number and value of each length-delimited
// field of a message, in order, skipping the others.
func fields(data []byte, fn func(num uint64, body []byte) error) error {
	for len(data) > 0 {
		key, n := uvarint(data)
		if n <= 0 {
			return errBadProto
		}
		data = data[n:]
		if wire := key & 7; wire != 2 {
			m := skipValue(data, 0, wire)
			if m < 0 {
				return errBadProto
			}
			data = data[m:]
			continue
		}
		size, n := uvarint(data)
		if n <= 0 || uint64(len(data)-n) < size {
			return errBadProto
		}
		if err := fn(key>>3, data[n:n+int(size)]); err != nil {
			return err
		}
		data = data[n+int(size):]
	}
	return nil
}

// protoDecoder returns a function that decodes the protobuf of one object
// of T (without its envelope) into a new T, keeping the fields of fs (nil:
// all). It reuses a buffer: it is not safe for concurrent use.
func protoDecoder[T Object](fs *fieldset) func([]byte) (T, error) {
	var buf []byte
	return func(raw []byte) (T, error) {
		obj := New[T]()
		u, ok := any(obj).(protoUnmarshaler)
		if !ok {
			return obj, fmt.Errorf("%T cannot be decoded from protobuf", obj)
		}
		raw, err := fs.keep(&buf, raw)
		if err != nil {
			return obj, err
		}
		return obj, u.Unmarshal(raw)
	}
}

// projectingDecoder returns a function that decodes the protobuf of one
// object of S, keeping the fields of fs, into an S it reuses, and returns
// its projection: no S is allocated per object. It is not safe for
// concurrent use.
func projectingDecoder[S, P Object](fs *fieldset, project func(S) P) func([]byte) (P, error) {
	var buf []byte
	scratch := New[S]()
	return func(raw []byte) (P, error) {
		var zero P
		u, ok := any(scratch).(interface {
			protoUnmarshaler
			Reset()
		})
		if !ok {
			return zero, fmt.Errorf("%T cannot be decoded from protobuf", scratch)
		}
		raw, err := fs.keep(&buf, raw)
		if err != nil {
			return zero, err
		}
		u.Reset()
		if err := u.Unmarshal(raw); err != nil {
			return zero, err
		}
		return project(scratch), nil
	}
}

// keep returns raw without the fields fs does not keep, filtered into
// *buf; raw itself for a nil fs, which keeps everything.
func (fs *fieldset) keep(buf *[]byte, raw []byte) ([]byte, error) {
	if fs == nil {
		return raw, nil
	}
	var err error
	*buf, err = fs.filter((*buf)[:0], raw)
	return *buf, err
}

// checkedOnce returns dec, which projects the fields a projection names,
// checking its first object against the projection of the whole object
// (decoded by whole): if they differ, the projection's function reads a
// field it does not name, and report says so. The objects decode as dec
// decodes them either way.
func checkedOnce[S, P Object](dec func([]byte) (P, error), whole func([]byte) (S, error), project func(S) P, report func(error)) func([]byte) (P, error) {
	checked := false
	return func(raw []byte) (P, error) {
		p, err := dec(raw)
		if err != nil || checked {
			return p, err
		}
		checked = true
		s, err := whole(raw)
		if err != nil {
			return p, nil
		}
		if want := project(s); !apiequality.Semantic.DeepEqual(p, want) {
			report(fmt.Errorf("ctrl: projection %T of %T reads fields its Project call does not name: for %s/%s it returns\n%+v\nfrom the fields named, and\n%+v\nfrom the whole object; name every field the function reads",
				p, s, s.GetNamespace(), s.GetName(), p, want))
		}
		return p, nil
	}
}
