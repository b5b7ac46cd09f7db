package binding

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLikeServer drives the fakes' deletions through the bindings, on
// the typed fake and on the dynamic one.
func TestLikeServer(t *testing.T) {
	ctx := context.Background()
	cm := func(name string, finalizers ...string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Finalizers: finalizers}}
	}
	typed := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{{Version: "v1", Resource: "configmaps"}: "ConfigMapList"})
	for _, f := range []any{typed, dyn} {
		if !LikeServer(f) {
			t.Fatalf("LikeServer(%T) = false", f)
		}
	}
	res := &Info{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true}
	typedB, err := For[*corev1.ConfigMap](Clients{Clientset: typed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dynB, err := For[*unstructured.Unstructured](Clients{Dynamic: dyn}, res)
	if err != nil {
		t.Fatal(err)
	}
	toU := func(c *corev1.ConfigMap) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		return u
	}
	type backend struct {
		create func(*corev1.ConfigMap) error
		get    func(name string) (metav1.Object, error)
		update func(metav1.Object) (metav1.Object, error)
		patch  func(name, patch string) (metav1.Object, error)
		delete func(name string, opts metav1.DeleteOptions) error
	}
	backends := map[string]backend{
		"typed": {
			create: func(c *corev1.ConfigMap) error { _, err := typedB.Create(ctx, c, metav1.CreateOptions{}); return err },
			get: func(name string) (metav1.Object, error) {
				return typedB.Get(ctx, "ns", name, metav1.GetOptions{})
			},
			update: func(o metav1.Object) (metav1.Object, error) {
				return typedB.Update(ctx, o.(*corev1.ConfigMap), metav1.UpdateOptions{})
			},
			patch: func(name, p string) (metav1.Object, error) {
				return typedB.Patch(ctx, "ns", name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
			},
			delete: func(name string, opts metav1.DeleteOptions) error { return typedB.Delete(ctx, "ns", name, opts) },
		},
		"dynamic": {
			create: func(c *corev1.ConfigMap) error {
				_, err := dynB.Create(ctx, toU(c), metav1.CreateOptions{})
				return err
			},
			get: func(name string) (metav1.Object, error) {
				return dynB.Get(ctx, "ns", name, metav1.GetOptions{})
			},
			update: func(o metav1.Object) (metav1.Object, error) {
				return dynB.Update(ctx, o.(*unstructured.Unstructured), metav1.UpdateOptions{})
			},
			patch: func(name, p string) (metav1.Object, error) {
				return dynB.Patch(ctx, "ns", name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
			},
			delete: func(name string, opts metav1.DeleteOptions) error { return dynB.Delete(ctx, "ns", name, opts) },
		},
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(b.create(cm("plain")))
			must(b.delete("plain", metav1.DeleteOptions{}))
			if _, err := b.get("plain"); !apierrors.IsNotFound(err) {
				t.Errorf("without finalizers: got %v after the delete, want NotFound", err)
			}

			must(b.create(cm("held", "a/one", "a/two")))
			wrong := types.UID("other")
			if err := b.delete("held", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}}); !apierrors.IsConflict(err) {
				t.Errorf("delete with another UID as precondition: got %v, want a conflict", err)
			}
			must(b.delete("held", metav1.DeleteOptions{}))
			obj, err := b.get("held")
			must(err)
			deleted := obj.GetDeletionTimestamp()
			if deleted == nil || len(obj.GetFinalizers()) != 2 {
				t.Fatalf("with finalizers: got deletionTimestamp %v, finalizers %v; want it set and both kept", deleted, obj.GetFinalizers())
			}
			must(b.delete("held", metav1.DeleteOptions{})) // again: nothing changes
			if obj, _ := b.get("held"); !obj.GetDeletionTimestamp().Equal(deleted) {
				t.Errorf("a second delete moved the deletionTimestamp from %v to %v", deleted, obj.GetDeletionTimestamp())
			}

			// An update that drops one finalizer and the timestamp keeps both
			// the object and its timestamp.
			obj.SetFinalizers([]string{"a/two"})
			obj.SetDeletionTimestamp(nil)
			out, err := b.update(obj)
			must(err)
			if !out.GetDeletionTimestamp().Equal(deleted) {
				t.Errorf("update: got deletionTimestamp %v, want %v kept", out.GetDeletionTimestamp(), deleted)
			}
			if obj.GetDeletionTimestamp() != nil {
				t.Error("update changed the caller's object")
			}
			if obj, err := b.get("held"); err != nil || !obj.GetDeletionTimestamp().Equal(deleted) || len(obj.GetFinalizers()) != 1 {
				t.Errorf("after the update: got %v, %v; want the object with one finalizer, being deleted", obj, err)
			}
			// The patch that removes the last one removes the object.
			out, err = b.patch("held", `{"metadata":{"finalizers":null}}`)
			must(err)
			if len(out.GetFinalizers()) != 0 {
				t.Errorf("patch returned finalizers %v, want none", out.GetFinalizers())
			}
			if _, err := b.get("held"); !apierrors.IsNotFound(err) {
				t.Errorf("after the last finalizer went: got %v, want NotFound", err)
			}

			// The same through an update.
			must(b.create(cm("updated", "a/one")))
			must(b.delete("updated", metav1.DeleteOptions{}))
			obj, err = b.get("updated")
			must(err)
			obj.SetFinalizers(nil)
			_, err = b.update(obj)
			must(err)
			if _, err := b.get("updated"); !apierrors.IsNotFound(err) {
				t.Errorf("after an update removed the last finalizer: got %v, want NotFound", err)
			}
		})
	}
}
