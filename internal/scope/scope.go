// Package scope is what a cache selects: namespaces, and label and field
// selectors, with what a client can evaluate of them.
package scope

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Scope is what a cache selects. The zero value selects everything.
type Scope struct {
	Namespaces []string        // sorted, without duplicates; none: all
	Labels     labels.Selector // nil: all
	Fields     fields.Selector // nil: all
}

// New defaults, sorts and deduplicates namespaces (none for a cluster-scoped
// kind; defaultNS if none is given; "" among them is every namespace) and
// drops empty selectors.
func New(namespaced bool, defaultNS string, namespaces []string, l labels.Selector, f fields.Selector) Scope {
	var s Scope
	if namespaced {
		if len(namespaces) == 0 && defaultNS != "" {
			namespaces = []string{defaultNS}
		}
		s.Namespaces = Namespaces(namespaces)
	}
	if l != nil && !l.Empty() {
		s.Labels = l
	}
	if f != nil && !f.Empty() {
		s.Fields = f
	}
	return s
}

// Namespaces returns namespaces sorted and without duplicates, or nil (all)
// if "" is among them.
func Namespaces(namespaces []string) []string {
	ns := slices.Clone(namespaces)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if slices.Contains(ns, "") {
		return nil
	}
	return ns
}

// String describes s: `in namespaces "a", "b" with labels "x=y"`.
func (s Scope) String() string {
	var parts []string
	switch len(s.Namespaces) {
	case 0:
	case 1:
		parts = append(parts, fmt.Sprintf("in namespace %q", s.Namespaces[0]))
	default:
		q := make([]string, len(s.Namespaces))
		for i, ns := range s.Namespaces {
			q[i] = fmt.Sprintf("%q", ns)
		}
		parts = append(parts, "in namespaces "+strings.Join(q, ", "))
	}
	if s.Labels != nil {
		parts = append(parts, fmt.Sprintf("with labels %q", s.Labels.String()))
	}
	if s.Fields != nil {
		parts = append(parts, fmt.Sprintf("with fields %q", s.Fields.String()))
	}
	return strings.Join(parts, " ")
}

// Selective reports whether s has a selector: objects may leave it while
// they exist.
func (s Scope) Selective() bool { return s.Labels != nil || s.Fields != nil }

// Holds reports whether s holds every object of namespace ns (of every
// namespace if ns is ""): no selector, and ns watched.
func (s Scope) Holds(ns string) bool {
	if s.Selective() {
		return false
	}
	return len(s.Namespaces) == 0 || ns != "" && slices.Contains(s.Namespaces, ns)
}

// Selection is what [Scope.Selects] found.
type Selection uint8

const (
	Selected    Selection = iota
	NotSelected           // certainly outside the scope
	Unsure                // a field selector this side cannot evaluate for sure
)

// Selects says whether obj is in the scope's selectors (namespaces aside).
// Other fields than metadata's are read by path, which the server does not
// always do (an Event's "source"): a field mismatch is Unsure, never
// NotSelected.
func (s Scope) Selects(obj metav1.Object) Selection {
	if s.Labels != nil && !s.Labels.Matches(labels.Set(obj.GetLabels())) {
		return NotSelected
	}
	if s.Fields == nil {
		return Selected
	}
	set := fields.Set{}
	var content map[string]any
	exact := true
	for _, r := range s.Fields.Requirements() {
		switch r.Field {
		case "metadata.name":
			set[r.Field] = obj.GetName()
		case "metadata.namespace":
			set[r.Field] = obj.GetNamespace()
		default:
			exact = false
			if content == nil {
				var err error
				if content, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
					return Unsure
				}
			}
			v, found, _ := unstructured.NestedFieldNoCopy(content, strings.Split(r.Field, ".")...)
			if found && v != nil {
				set[r.Field] = fmt.Sprint(v)
			} else {
				set[r.Field] = ""
			}
		}
	}
	switch {
	case s.Fields.Matches(set):
		return Selected
	case exact:
		return NotSelected
	}
	return Unsure
}
