// Package crd reads what a cache needs of a CustomResourceDefinition,
// held as unstructured: whether it serves a version, and why not.
package crd

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Trim keeps what State reads of a CRD: its identity, its served
// versions and its conditions, not its schemas.
func Trim(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var kept []any
	for _, v := range versions {
		if v, ok := v.(map[string]any); ok {
			kept = append(kept, map[string]any{"name": v["name"], "served": v["served"]})
		}
	}
	if kept != nil {
		_ = unstructured.SetNestedSlice(out.Object, kept, "spec", "versions")
	}
	if conds, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
		_ = unstructured.SetNestedSlice(out.Object, conds, "status", "conditions")
	}
	return out
}

// NotEstablished is why a CRD that serves the version does not serve it yet.
const NotEstablished = "not Established yet"

// State says whether crd (nil: absent) serves version, and if not, why.
func State(crd *unstructured.Unstructured, version string) (served bool, why string) {
	if crd == nil {
		return false, "not installed"
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if !slices.ContainsFunc(versions, func(v any) bool {
		m, _ := v.(map[string]any)
		served, _ := m["served"].(bool)
		return m["name"] == version && served
	}) {
		return false, fmt.Sprintf("does not serve version %s", version)
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	if !slices.ContainsFunc(conds, func(c any) bool {
		m, _ := c.(map[string]any)
		return m["type"] == "Established" && m["status"] == "True"
	}) {
		return false, NotEstablished
	}
	return true, ""
}
