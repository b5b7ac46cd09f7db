package binding

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// List is the list type of every bound type. Because it is generic, no
// per-type list (ConfigMapList, ...) is linked or registered; it decodes from
// JSON by its field tags and from protobuf by Unmarshal, which walks the two
// fields every Kubernetes list shares: 1 metadata, 2 items.
type List[T Object] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *List[T]) DeepCopyObject() runtime.Object {
	out := &List[T]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]T, len(l.Items))
	for i, it := range l.Items {
		out.Items[i] = it.DeepCopyObject().(T)
	}
	return out
}

// Reset clears the list; the protobuf decoder calls it before Unmarshal.
func (l *List[T]) Reset() { *l = List[T]{} }

// protoUnmarshaler is implemented by every generated type of k8s.io/api.
type protoUnmarshaler interface{ Unmarshal([]byte) error }

// Unmarshal decodes the protobuf encoding of a Kubernetes list.
func (l *List[T]) Unmarshal(data []byte) error {
	for len(data) > 0 {
		key, n := uvarint(data)
		if n <= 0 {
			return errBadProto
		}
		data = data[n:]
		field, wire := key>>3, key&7
		if wire != 2 { // every field we know is length-delimited; skip others
			m := skip(data, wire)
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
		body := data[n : n+int(size)]
		data = data[n+int(size):]
		switch field {
		case 1:
			if err := l.ListMeta.Unmarshal(body); err != nil {
				return err
			}
		case 2:
			item := New[T]()
			u, ok := any(item).(protoUnmarshaler)
			if !ok {
				return fmt.Errorf("%T cannot be decoded from protobuf", item)
			}
			if err := u.Unmarshal(body); err != nil {
				return err
			}
			l.Items = append(l.Items, item)
		}
	}
	return nil
}

var errBadProto = errors.New("malformed protobuf")

func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return x, i + 1
		}
	}
	return 0, -1
}

// skip returns the length of a field's value of the given wire type.
func skip(b []byte, wire uint64) int {
	switch wire {
	case 0:
		_, n := uvarint(b)
		return n
	case 1:
		if len(b) < 8 {
			return -1
		}
		return 8
	case 5:
		if len(b) < 4 {
			return -1
		}
		return 4
	}
	return -1
}
