package ctrl

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl/internal/binding"
)

// scope is what a cache selects: namespaces (none: all) and selectors (nil: all).
type scope struct {
	namespaces []string
	labels     labels.Selector
	fields     fields.Selector
}

// newScope defaults, sorts and dedups namespaces; empty selectors become nil.
func newScope(info binding.Info, managerNS string, opts CacheOptions) scope {
	var sc scope
	if info.Namespaced {
		sc.namespaces = slices.Clone(opts.Namespaces)
		if len(sc.namespaces) == 0 && managerNS != "" {
			sc.namespaces = []string{managerNS}
		}
		slices.Sort(sc.namespaces)
		sc.namespaces = slices.Compact(sc.namespaces)
		if slices.Contains(sc.namespaces, "") {
			sc.namespaces = nil // "" is every namespace
		}
	}
	if opts.LabelSelector != nil && !opts.LabelSelector.Empty() {
		sc.labels = opts.LabelSelector
	}
	if opts.FieldSelector != nil && !opts.FieldSelector.Empty() {
		sc.fields = opts.FieldSelector
	}
	return sc
}

// String describes the scope: `in namespaces "a", "b" with labels "x=y"`.
func (s scope) String() string {
	var parts []string
	switch len(s.namespaces) {
	case 0:
	case 1:
		parts = append(parts, fmt.Sprintf("in namespace %q", s.namespaces[0]))
	default:
		q := make([]string, len(s.namespaces))
		for i, ns := range s.namespaces {
			q[i] = fmt.Sprintf("%q", ns)
		}
		parts = append(parts, "in namespaces "+strings.Join(q, ", "))
	}
	if s.labels != nil {
		parts = append(parts, fmt.Sprintf("with labels %q", s.labels.String()))
	}
	if s.fields != nil {
		parts = append(parts, fmt.Sprintf("with fields %q", s.fields.String()))
	}
	return strings.Join(parts, " ")
}

// selective: objects may leave the cache while they exist (a selector, a share label).
func (c *Cache[T]) selective() bool {
	if c.scope.labels != nil || c.scope.fields != nil {
		return true
	}
	return c.share != nil && c.share.View().Label != nil
}

type selection uint8

const (
	selected    selection = iota
	notSelected           // certainly outside the scope
	unsure                // a field selector this side cannot evaluate for sure
)

// selects says whether obj is in the scope's selectors (namespaces aside).
// Other fields than metadata's are read by path, which the server does not
// always do (an Event's "source"): a field mismatch is unsure, never
// notSelected.
func (s scope) selects(obj Object) selection {
	if s.labels != nil && !s.labels.Matches(labels.Set(obj.GetLabels())) {
		return notSelected
	}
	if s.fields == nil {
		return selected
	}
	set := fields.Set{}
	var content map[string]any
	exact := true
	for _, r := range s.fields.Requirements() {
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
					return unsure
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
	case s.fields.Matches(set):
		return selected
	case exact:
		return notSelected
	}
	return unsure
}

func (c *Cache[T]) currentScope() scope {
	sc := c.scope
	if ns := c.namespaces.Load(); ns != nil {
		sc.namespaces = *ns
	}
	return sc
}

// covers: no selector, key's namespace watched, key's cluster the cache's.
func (c *Cache[T]) covers(key Key) bool {
	ns := c.currentScope().namespaces
	return c.coversCluster(key.Cluster) && c.scope.labels == nil && c.scope.fields == nil &&
		(len(ns) == 0 || slices.Contains(ns, key.Namespace)) &&
		(c.share == nil || c.share.HoldsAll(key.Namespace))
}

func (c *Cache[T]) coversNamespace(cluster, ns string) bool {
	if !c.coversCluster(cluster) || c.scope.labels != nil || c.scope.fields != nil {
		return false
	}
	if c.share != nil && !c.share.HoldsAll(ns) {
		return false
	}
	namespaces := c.currentScope().namespaces
	if len(namespaces) == 0 {
		return true
	}
	return ns != "" && slices.Contains(namespaces, ns)
}

// coversCluster: own cluster for an ordinary cache, an engaged member for a fleet's.
func (c *Cache[T]) coversCluster(cluster string) bool {
	if !c.opts.Fleet {
		return cluster == ""
	}
	c.rewire.Lock()
	defer c.rewire.Unlock()
	return c.members[cluster] != nil
}

func describeScope[T Object](caches []*Cache[T]) string {
	if len(caches) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range caches {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}
