package ctrltest

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/builtin"
)

// NewFakeDynamic returns client-go's fake dynamic client, set up to serve
// every custom resource type registered with ctrl.Register and every
// built-in resource, for ctrl.Options.FakeDynamic in unit tests. It holds
// objects, which may be of registered types or *unstructured.Unstructured
// with their apiVersion and kind set. Register the types first (an init
// function does).
//
// client-go's fake needs the list kind of every resource it lists, or
// panics on the first list; NewFakeDynamic names them from the
// registrations, so no map is written by hand. A resource that is neither
// registered nor built in is served if one of objects is of its kind. It
// panics if an object cannot be converted, as client-go's constructors do.
func NewFakeDynamic(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	listKinds := map[schema.GroupVersionResource]string{}
	byType := map[reflect.Type]binding.Info{}
	byKind := map[schema.GroupVersionKind]schema.GroupVersionResource{}
	for r := range builtin.All() {
		gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
		listKinds[gvr] = r.Kind + "List"
		byKind[gvr.GroupVersion().WithKind(r.Kind)] = gvr
	}
	for _, info := range binding.Registered() {
		listKinds[info.GVR] = info.Kind + "List"
		byType[info.Type] = info
		byKind[info.GVK()] = info.GVR
	}
	type stored struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}
	var add []stored
	for _, obj := range objects {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			info, registered := byType[reflect.TypeOf(obj)]
			if !registered {
				panic(fmt.Sprintf("ctrltest: NewFakeDynamic: %T is not registered with ctrl.Register, and not *unstructured.Unstructured", obj))
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				panic(fmt.Sprintf("ctrltest: NewFakeDynamic: %T: %v", obj, err))
			}
			u = &unstructured.Unstructured{Object: m}
			u.SetGroupVersionKind(info.GVK())
		}
		gvk := u.GroupVersionKind()
		if gvk.Version == "" || gvk.Kind == "" {
			panic(fmt.Sprintf("ctrltest: NewFakeDynamic: object %s/%s has no apiVersion and kind", u.GetNamespace(), u.GetName()))
		}
		gvr, known := byKind[gvk]
		if !known {
			gvr, _ = meta.UnsafeGuessKindToResource(gvk)
			listKinds[gvr] = gvk.Kind + "List"
		}
		add = append(add, stored{gvr, u})
	}
	f := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	for _, s := range add {
		// Created under the resource they are served as, which a guess
		// from the kind (what the fake's own constructor does) can miss.
		if err := f.Tracker().Create(s.gvr, s.obj, s.obj.GetNamespace()); err != nil {
			panic(fmt.Sprintf("ctrltest: NewFakeDynamic: %s %s/%s: %v", s.gvr.Resource, s.obj.GetNamespace(), s.obj.GetName(), err))
		}
	}
	return f
}
