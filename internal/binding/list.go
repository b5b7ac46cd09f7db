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
	return fields(data, func(num uint64, body []byte) error {
		switch num {
		case 1:
			return l.ListMeta.Unmarshal(body)
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
		return nil
	})
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
