package binding

import (
	"cmp"
	"slices"
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
