package binding

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/crd"
)

// Registered returns the Info of every type recorded by Register, ordered by
// group, resource and version.
func Registered() []Info {
	var infos []Info
	registry.Range(func(_, info any) bool {
		infos = append(infos, info.(Info))
		return true
	})
	slices.SortFunc(infos, func(a, b Info) int {
		return cmp.Or(
			cmp.Compare(a.GVR.Group, b.GVR.Group),
			cmp.Compare(a.GVR.Resource, b.GVR.Resource),
			cmp.Compare(a.GVR.Version, b.GVR.Version),
			cmp.Compare(a.Type.String(), b.Type.String()))
	})
	return infos
}

// FromCRD returns i, a registration naming the CRD manifest data, completed
// with what the manifest says of i's version (or its only served version):
// group, plural, kind, scope and status subresource. A field i declares
// that the manifest contradicts is an error naming both.
func (i Info) FromCRD(data []byte) (Info, error) {
	kind := i.Kind
	if kind == "" && i.Type.Kind() == reflect.Pointer {
		kind = i.Type.Elem().Name()
	}
	v, err := crd.Read(data, kind, i.GVR.Version)
	if err != nil {
		return i, fmt.Errorf("%s: APIResource.CRD: %w", i.Type, err)
	}
	scope := map[bool]string{true: "namespaced", false: "cluster-scoped"}
	switch {
	case i.GVR.Group != "" && i.GVR.Group != v.Group:
		return i, fmt.Errorf("%s: APIResource.Group is %q, but CRD %s is of group %q", i.Type, i.GVR.Group, v.Name, v.Group)
	case i.GVR.Resource != "" && i.GVR.Resource != v.Plural:
		return i, fmt.Errorf("%s: APIResource.Resource is %q, but CRD %s names the plural %q", i.Type, i.GVR.Resource, v.Name, v.Plural)
	case !i.ScopeUnknown && i.Namespaced != v.Namespaced:
		return i, fmt.Errorf("%s: APIResource.Namespaced or ClusterScoped is set, but CRD %s is %s", i.Type, v.Name, scope[v.Namespaced])
	case !i.StatusUnknown && i.Status && !v.Status:
		return i, fmt.Errorf("%s: APIResource.Status is set, but CRD %s has no status subresource in version %s", i.Type, v.Name, v.Version)
	}
	i.GVR = schema.GroupVersionResource{Group: v.Group, Version: v.Version, Resource: v.Plural}
	i.Kind, i.Namespaced, i.Status = v.Kind, v.Namespaced, v.Status
	i.ScopeUnknown, i.StatusUnknown = false, false
	return i, nil
}
