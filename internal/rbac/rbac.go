// Package rbac collects the RBAC verbs a program needs, by resource, into
// the rules of a Role or ClusterRole.
package rbac

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Grants are verbs by resource. The zero value is empty; it is safe for
// concurrent use.
type Grants struct {
	mu    sync.Mutex
	verbs map[schema.GroupResource]map[string]bool
	other []rbacv1.PolicyRule // of resource names or non-resource URLs, as given
}

// Add adds rules: those of resources as verbs by resource, the others
// (resource names, non-resource URLs) as they are.
func (g *Grants) Add(rules ...rbacv1.PolicyRule) {
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			g.mu.Lock()
			if !slices.ContainsFunc(g.other, func(o rbacv1.PolicyRule) bool { return reflect.DeepEqual(o, r) }) {
				g.other = append(g.other, *r.DeepCopy())
			}
			g.mu.Unlock()
			continue
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				g.Need(schema.GroupResource{Group: group, Resource: res}, r.Verbs...)
			}
		}
	}
}

// Need adds verbs on gr.
func (g *Grants) Need(gr schema.GroupResource, verbs ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verbs == nil {
		g.verbs = map[schema.GroupResource]map[string]bool{}
	}
	if g.verbs[gr] == nil {
		g.verbs[gr] = map[string]bool{}
	}
	for _, v := range verbs {
		g.verbs[gr][v] = true
	}
}

// Rules returns one rule per resource, sorted by group and resource, each
// with its verbs sorted, then the other rules added, in order.
func (g *Grants) Rules() []rbacv1.PolicyRule {
	g.mu.Lock()
	defer g.mu.Unlock()
	var rules []rbacv1.PolicyRule
	for gr, verbs := range g.verbs {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{gr.Group},
			Resources: []string{gr.Resource},
			Verbs:     slices.Sorted(maps.Keys(verbs)),
		})
	}
	slices.SortFunc(rules, func(a, b rbacv1.PolicyRule) int {
		return cmp.Or(strings.Compare(a.APIGroups[0], b.APIGroups[0]), strings.Compare(a.Resources[0], b.Resources[0]))
	})
	for _, r := range g.other {
		rules = append(rules, *r.DeepCopy())
	}
	return rules
}
