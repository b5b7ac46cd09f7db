package binding

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
)

// Invoker is the part of client-go's fake clientset (*testing.Fake) that
// runs actions through its reactors and object tracker.
type Invoker interface {
	Invokes(action clienttesting.Action, defaultReturnObj runtime.Object) (runtime.Object, error)
	InvokesWatch(action clienttesting.Action) (watch.Interface, error)
}

// fakeBackend serves built-in types from client-go's fake clientset, with the
// same actions its generated fake clients record, so reactors and Actions()
// work as users expect.
type fakeBackend[T Object] struct {
	info Info
	fake Invoker
}

func (b *fakeBackend[T]) Fake() bool { return true }

func (b *fakeBackend[T]) ns(namespace string) string {
	if !b.info.Namespaced {
		return ""
	}
	return namespace
}

func (b *fakeBackend[T]) result(obj runtime.Object, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if obj == nil {
		return zero, nil
	}
	return obj.(T), nil
}

func (b *fakeBackend[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	return b.result(b.fake.Invokes(clienttesting.NewGetActionWithOptions(b.info.GVR, b.ns(namespace), name, opts), New[T]()))
}

func (b *fakeBackend[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[T], error) {
	obj, err := b.fake.Invokes(clienttesting.NewListActionWithOptions(b.info.GVR, b.info.GVK(), b.ns(namespace), opts), nil)
	if err != nil {
		return nil, err
	}
	return toList[T](obj, opts)
}

// toList converts a list returned by a fake into a List[T], applying the
// label selector as client-go's generated fakes do.
func toList[T Object](obj runtime.Object, opts metav1.ListOptions) (*List[T], error) {
	sel := labels.Everything()
	if opts.LabelSelector != "" {
		var err error
		if sel, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, err
		}
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	out := &List[T]{}
	if lm, err := meta.ListAccessor(obj); err == nil {
		out.ResourceVersion, out.Continue = lm.GetResourceVersion(), lm.GetContinue()
	}
	for _, it := range items {
		t, err := convert[T](it)
		if err != nil {
			return nil, err
		}
		if sel.Matches(labels.Set(t.GetLabels())) {
			out.Items = append(out.Items, t)
		}
	}
	return out, nil
}

func (b *fakeBackend[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return b.fake.InvokesWatch(clienttesting.NewWatchActionWithOptions(b.info.GVR, b.ns(namespace), opts))
}

func (b *fakeBackend[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	return b.result(b.fake.Invokes(clienttesting.NewCreateActionWithOptions(b.info.GVR, b.ns(obj.GetNamespace()), obj, opts), New[T]()))
}

func (b *fakeBackend[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return b.result(b.fake.Invokes(clienttesting.NewUpdateActionWithOptions(b.info.GVR, b.ns(obj.GetNamespace()), obj, opts), New[T]()))
}

func (b *fakeBackend[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return b.result(b.fake.Invokes(clienttesting.NewUpdateSubresourceActionWithOptions(b.info.GVR, "status", b.ns(obj.GetNamespace()), obj, opts), New[T]()))
}

func (b *fakeBackend[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	return b.result(b.fake.Invokes(clienttesting.NewPatchSubresourceActionWithOptions(b.info.GVR, b.ns(namespace), name, pt, data, opts, subresources...), New[T]()))
}

func (b *fakeBackend[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	_, err := b.fake.Invokes(clienttesting.NewDeleteActionWithOptions(b.info.GVR, b.ns(namespace), name, opts), New[T]())
	return err
}
