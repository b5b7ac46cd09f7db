package crd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Version is what a CustomResourceDefinition manifest says of one version
// of its resource: all a binding needs, so that wiring it asks no server.
type Version struct {
	Name       string // the CRD's: plural.group
	Group      string
	Version    string
	Plural     string
	Kind       string
	Namespaced bool
	Status     bool // the version has a status subresource
}

// manifest is the part of apiextensions.k8s.io/v1 CustomResourceDefinition
// read here: that module is no dependency of ctrl's.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
			Kind   string `json:"kind"`
		} `json:"names"`
		Scope    string            `json:"scope"`
		Versions []manifestVersion `json:"versions"`
	} `json:"spec"`
}

type manifestVersion struct {
	Name         string `json:"name"`
	Served       bool   `json:"served"`
	Subresources struct {
		Status *struct{} `json:"status"`
	} `json:"subresources"`
}

// Read returns what the CustomResourceDefinition of kind in data says of
// version. data is YAML or JSON, one document or several, as controller-gen
// writes it. An empty version picks the CRD's only served version; an empty
// kind, the only CRD. The error says what to set when data cannot decide.
func Read(data []byte, kind, version string) (Version, error) {
	crds, err := decode(data)
	if err != nil {
		return Version{}, err
	}
	var kinds []string
	var found *manifest
	for i := range crds {
		kinds = append(kinds, crds[i].Spec.Names.Kind)
		if crds[i].Spec.Names.Kind == kind || kind == "" && len(crds) == 1 {
			found = &crds[i]
		}
	}
	switch {
	case len(crds) == 0:
		return Version{}, errors.New("the CRD manifest holds no CustomResourceDefinition")
	case found == nil && len(crds) == 1:
		return Version{}, fmt.Errorf("its kind is %q (APIResource.Kind, or the Go type's name), but CRD %s is of kind %q: set APIResource.Kind", kind, crds[0].Metadata.Name, kinds[0])
	case found == nil:
		return Version{}, fmt.Errorf("the CRD manifest has no CustomResourceDefinition of kind %q, only of %s: set APIResource.Kind", kind, strings.Join(kinds, ", "))
	}
	c := found
	var served []string
	for _, v := range c.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	if version == "" {
		if len(served) != 1 {
			return Version{}, fmt.Errorf("CRD %s serves versions %s: set APIResource.Version", c.Metadata.Name, strings.Join(served, ", "))
		}
		version = served[0]
	}
	i := slices.IndexFunc(c.Spec.Versions, func(v manifestVersion) bool { return v.Name == version })
	if i < 0 || !c.Spec.Versions[i].Served {
		return Version{}, fmt.Errorf("CRD %s does not serve version %s, only %s", c.Metadata.Name, version, strings.Join(served, ", "))
	}
	var namespaced bool
	switch c.Spec.Scope {
	case "Namespaced":
		namespaced = true
	case "Cluster":
	default:
		return Version{}, fmt.Errorf("CRD %s: spec.scope is %q, want Namespaced or Cluster", c.Metadata.Name, c.Spec.Scope)
	}
	return Version{
		Name:       c.Metadata.Name,
		Group:      c.Spec.Group,
		Version:    version,
		Plural:     c.Spec.Names.Plural,
		Kind:       c.Spec.Names.Kind,
		Namespaced: namespaced,
		Status:     c.Spec.Versions[i].Subresources.Status != nil,
	}, nil
}

// decode reads the CustomResourceDefinitions of data, skipping empty
// documents and failing on any other kind.
func decode(data []byte) ([]manifest, error) {
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []manifest
	for {
		var m manifest
		err := r.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding the CRD manifest: %w", err)
		}
		switch {
		case m.Kind == "" && m.APIVersion == "":
			continue // an empty document
		case m.Kind != "CustomResourceDefinition" || !strings.HasPrefix(m.APIVersion, "apiextensions.k8s.io/"):
			return nil, fmt.Errorf("the CRD manifest holds a %s %s, want apiextensions.k8s.io/v1 CustomResourceDefinition", m.APIVersion, m.Kind)
		}
		out = append(out, m)
	}
}
