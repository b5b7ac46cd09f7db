package binding

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// dynamicBackend serves custom resources from a dynamic client (in tests,
// client-go's fake dynamic client), converting between unstructured objects
// and T.
type dynamicBackend[T Object] struct {
	info   Info
	client dynamic.NamespaceableResourceInterface
	fake   bool // client-go's fake dynamic client
}

// Fake reports whether the client is a fake. Typed custom resources reach
// a real API server through the REST backend, which decodes straight into
// T; *unstructured.Unstructured reaches it through a real dynamic client.
func (b *dynamicBackend[T]) Fake() bool { return b.fake }

func (b *dynamicBackend[T]) ri(namespace string) dynamic.ResourceInterface {
	if !b.info.Namespaced {
		return b.client
	}
	return b.client.Namespace(namespace)
}

// convert turns an unstructured object (or T itself) into T.
func convert[T Object](obj runtime.Object) (T, error) {
	if t, ok := obj.(T); ok {
		return t, nil
	}
	var zero T
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return zero, fmt.Errorf("got %T, want %T", obj, zero)
	}
	t := New[T]()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return zero, fmt.Errorf("decode %s into %T: %w", u.GroupVersionKind(), t, err)
	}
	return t, nil
}

func (b *dynamicBackend[T]) toUnstructured(obj T) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(b.info.GVK())
	return u, nil
}

func (b *dynamicBackend[T]) result(u *unstructured.Unstructured, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return convert[T](u)
}

func (b *dynamicBackend[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	return b.result(b.ri(namespace).Get(ctx, name, opts))
}

func (b *dynamicBackend[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (_ *List[T], err error) {
	if b.fake {
		defer recoverListKind(b.info, &err)
	}
	l, err := b.ri(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return toList[T](l, opts)
}

func (b *dynamicBackend[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := b.ri(namespace).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	if reflect.TypeFor[T]() == unstructuredType {
		return w, nil // nothing to convert: no goroutine between the stream and the cache
	}
	return convertWatch[T](w), nil
}

// ErrNoListKind is the error of a list on client-go's fake dynamic client
// that was not told the resource's list kind: the fake panics, and the
// binding turns the panic into this error.
var ErrNoListKind = errors.New("the fake dynamic client does not know the resource's list kind: " +
	"create it with ctrltest.NewFakeDynamic(objects...), or give dynamicfake.NewSimpleDynamicClientWithCustomListKinds the list kind of every resource it serves")

// recoverListKind turns the fake dynamic client's panic over a missing list
// kind into ErrNoListKind. Deferred by lists on the fake.
func recoverListKind(info Info, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %w", info, ErrNoListKind)
	}
}

// convertWatch passes the events of w on with their objects converted to T.
// Unlike watch.Filter, whose goroutine blocks forever on an event nobody
// reads once the watch is stopped, it ends when stopped.
func convertWatch[T Object](w watch.Interface) watch.Interface {
	ch := make(chan watch.Event)
	out := watch.NewProxyWatcher(ch)
	go func() {
		defer close(ch)
		defer w.Stop()
		for {
			var ev watch.Event
			var ok bool
			select {
			case ev, ok = <-w.ResultChan():
			case <-out.StopChan():
				return
			}
			if !ok {
				return
			}
			if ev.Type != watch.Error {
				if t, err := convert[T](ev.Object); err != nil {
					ev = watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}
				} else {
					ev.Object = t
				}
			}
			select {
			case ch <- ev:
			case <-out.StopChan():
				return
			}
		}
	}()
	return out
}

func (b *dynamicBackend[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	u, err := b.toUnstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return b.result(b.ri(obj.GetNamespace()).Create(ctx, u, opts))
}

func (b *dynamicBackend[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	u, err := b.toUnstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return b.result(b.ri(obj.GetNamespace()).Update(ctx, u, opts))
}

func (b *dynamicBackend[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	u, err := b.toUnstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return b.result(b.ri(obj.GetNamespace()).UpdateStatus(ctx, u, opts))
}

func (b *dynamicBackend[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	return b.result(b.ri(namespace).Patch(ctx, name, pt, data, opts, subresources...))
}

func (b *dynamicBackend[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return b.ri(namespace).Delete(ctx, name, opts)
}
