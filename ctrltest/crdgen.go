package ctrltest

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/version"

	"github.com/typedctrl/ctrl/internal/binding"
)

// generateCRDs returns a CRD for each resource registered with ctrl.Register
// that none of defined is for (Options.GenerateCRDs).
func generateCRDs(defined []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	skip := map[string]bool{}
	for _, crd := range defined {
		skip[crd.GetName()] = true
	}
	var names []string
	byName := map[string][]binding.Info{}
	for _, info := range binding.Registered() {
		name := info.GVR.Resource + "." + info.GVR.Group
		if skip[name] {
			continue
		}
		if byName[name] == nil {
			names = append(names, name)
		}
		byName[name] = append(byName[name], info)
	}
	var crds []*unstructured.Unstructured
	for _, name := range names {
		crd, err := generateCRD(name, byName[name])
		if err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// generateCRD returns the CRD name of the registrations infos, which are of
// one group and resource: one version per registered version, stored at the
// highest, each keeping every field.
func generateCRD(name string, infos []binding.Info) (*unstructured.Unstructured, error) {
	first := infos[0]
	storage := first.GVR.Version
	status := map[string]bool{}
	var order []string
	for _, info := range infos {
		if info.Kind != first.Kind || info.Namespaced != first.Namespaced {
			return nil, fmt.Errorf("ctrltest: generating the CRD %s: %s and %s are registered with different kinds or scopes", name, first, info)
		}
		v := info.GVR.Version
		if _, seen := status[v]; !seen {
			order = append(order, v)
		}
		status[v] = status[v] || info.Status
		if version.CompareKubeAwareVersionStrings(v, storage) > 0 {
			storage = v
		}
	}
	var versions []any
	for _, v := range order {
		ver := map[string]any{
			"name":    v,
			"served":  true,
			"storage": v == storage,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type":                                 "object",
				"x-kubernetes-preserve-unknown-fields": true,
			}},
		}
		if status[v] {
			ver["subresources"] = map[string]any{"status": map[string]any{}}
		}
		versions = append(versions, ver)
	}
	scope := "Cluster"
	if first.Namespaced {
		scope = "Namespaced"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": first.GVR.Group,
			"scope": scope,
			"names": map[string]any{
				"kind":     first.Kind,
				"listKind": first.Kind + "List",
				"plural":   first.GVR.Resource,
				"singular": strings.ToLower(first.Kind),
			},
			"versions": versions,
		},
	}}, nil
}
