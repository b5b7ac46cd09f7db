package ctrl

import (
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Typed decoding drops apiVersion and kind; caches and clients put them
// back, for code that serializes objects or refers to them.

// typeMetaOf is built once per binding, so that stamping allocates nothing.
func typeMetaOf(info binding.Info) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: info.GVR.GroupVersion().String(), Kind: info.Kind}
}

// stamp sets tm on obj, replacing what it carries (nothing, or for metadata
// the response's meta.k8s.io kind); an unstructured object keeps its own.
func stamp[T Object](obj T, tm metav1.TypeMeta) {
	switch k := obj.GetObjectKind().(type) {
	case *metav1.TypeMeta:
		*k = tm
	default:
		if k.GroupVersionKind().Empty() {
			k.SetGroupVersionKind(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
		}
	}
}

// ReferenceOf returns a reference to obj, for status fields that point at
// other objects: its apiVersion and kind from T's registration (or, for
// unstructured and metadata objects, their own), and its namespace, name,
// uid and resourceVersion. It returns an error if obj is nil or its kind
// is not known.
func ReferenceOf[T Object](obj T) (corev1.ObjectReference, error) {
	if v := reflect.ValueOf(obj); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return corev1.ObjectReference{}, fmt.Errorf("ctrl: ReferenceOf %s: nil object", reflect.TypeFor[T]())
	}
	var gvk schema.GroupVersionKind
	switch t := reflect.TypeFor[T](); t {
	case binding.UnstructuredType, binding.MetadataType:
		if gvk = obj.GetObjectKind().GroupVersionKind(); gvk.Version == "" || gvk.Kind == "" {
			return corev1.ObjectReference{}, fmt.Errorf("ctrl: ReferenceOf %s %s: the object has no apiVersion and kind", t, KeyOf(obj))
		}
	default:
		info, err := binding.InfoFor[T](nil)
		if err != nil {
			return corev1.ObjectReference{}, fmt.Errorf("ctrl: ReferenceOf: %w", err)
		}
		gvk = info.GVK()
	}
	return reference(gvk, obj), nil
}

func reference(gvk schema.GroupVersionKind, obj metav1.Object) corev1.ObjectReference {
	return corev1.ObjectReference{
		APIVersion:      gvk.GroupVersion().String(),
		Kind:            gvk.Kind,
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		UID:             obj.GetUID(),
		ResourceVersion: obj.GetResourceVersion(),
	}
}
