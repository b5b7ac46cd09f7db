package binding

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	clienttesting "k8s.io/client-go/testing"
)

// fakeMetadata serves metadata-only objects from a fake that holds full
// ones: client-go's typed fake for built-in resources, the dynamic fake for
// the others. Reads turn each object into metadata; watches send the full
// objects, which the cache's store turns (Binding.Project).
type fakeMetadata[T Object] struct {
	info    Info
	fake    Invoker                                // built-in resources
	dynamic dynamic.NamespaceableResourceInterface // the others
	toT     func(any) (T, bool)
}

func (b *fakeMetadata[T]) Fake() bool { return true }

func (b *fakeMetadata[T]) ns(namespace string) string {
	if !b.info.Namespaced {
		return ""
	}
	return namespace
}

func (b *fakeMetadata[T]) ri(namespace string) dynamic.ResourceInterface {
	if !b.info.Namespaced {
		return b.dynamic
	}
	return b.dynamic.Namespace(namespace)
}

func (b *fakeMetadata[T]) one(obj runtime.Object, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	t, _ := b.toT(obj)
	return t, nil
}

func (b *fakeMetadata[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	if b.fake != nil {
		return b.one(b.fake.Invokes(clienttesting.NewGetActionWithOptions(b.info.GVR, b.ns(namespace), name, opts), nil))
	}
	return b.one(b.ri(namespace).Get(ctx, name, opts))
}

func (b *fakeMetadata[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (_ *List[T], err error) {
	var obj runtime.Object
	if b.fake != nil {
		obj, err = b.fake.Invokes(clienttesting.NewListActionWithOptions(b.info.GVR, b.info.GVK(), b.ns(namespace), opts), nil)
	} else {
		defer recoverListKind(b.info, &err)
		obj, err = b.ri(namespace).List(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	sel := labels.Everything()
	if opts.LabelSelector != "" {
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
		out.ResourceVersion = lm.GetResourceVersion()
	}
	for _, it := range items {
		if t, ok := b.toT(it); ok && sel.Matches(labels.Set(t.GetLabels())) {
			out.Items = append(out.Items, t)
		}
	}
	return out, nil
}

func (b *fakeMetadata[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	if b.fake != nil {
		return b.fake.InvokesWatch(clienttesting.NewWatchActionWithOptions(b.info.GVR, b.ns(namespace), opts))
	}
	return b.ri(namespace).Watch(ctx, opts)
}

func (b *fakeMetadata[T]) Create(context.Context, T, metav1.CreateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *fakeMetadata[T]) Update(context.Context, T, metav1.UpdateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *fakeMetadata[T]) UpdateStatus(context.Context, T, metav1.UpdateOptions) (T, error) {
	var zero T
	return zero, ErrMetadataOnly
}

func (b *fakeMetadata[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	if b.fake != nil {
		return b.one(b.fake.Invokes(clienttesting.NewPatchSubresourceActionWithOptions(b.info.GVR, b.ns(namespace), name, pt, data, opts, subresources...), nil))
	}
	return b.one(b.ri(namespace).Patch(ctx, name, pt, data, opts, subresources...))
}

func (b *fakeMetadata[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	if b.fake != nil {
		_, err := b.fake.Invokes(clienttesting.NewDeleteActionWithOptions(b.info.GVR, b.ns(namespace), name, opts), nil)
		return err
	}
	return b.ri(namespace).Delete(ctx, name, opts)
}
