package ctrl

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// grants are the RBAC verbs the manager needs beyond its caches.
type grants struct {
	mu    sync.Mutex
	verbs map[schema.GroupResource]map[string]bool
}

func (m *Manager) need(gr schema.GroupResource, verbs ...string) {
	m.grants.mu.Lock()
	defer m.grants.mu.Unlock()
	if m.grants.verbs == nil {
		m.grants.verbs = map[schema.GroupResource]map[string]bool{}
	}
	if m.grants.verbs[gr] == nil {
		m.grants.verbs[gr] = map[string]bool{}
	}
	for _, v := range verbs {
		m.grants.verbs[gr][v] = true
	}
}

// RBACRules returns the rules the manager's own work needs in its own
// cluster, as wired so far, one per resource, sorted: list and watch per
// cache; Leases (get, create, update; delete for a ring) and patch of the
// objects a ring's label mode labels; Events (create, update, patch) for
// recorders; patch of owned finalizers and machines' status; create of
// TokenReviews and SubjectAccessReviews for secure metrics; webhooks need
// none. Add your reconciles' writes and uncached reads. Call it after wiring.
func (m *Manager) RBACRules() []rbacv1.PolicyRule {
	m.mu.Lock()
	caches := slices.Clone(m.cacheList)
	m.mu.Unlock()
	if m.opts.MetricsAddress != "" && !m.opts.MetricsServing.Insecure {
		m.need(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "create")
		m.need(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "create")
	}
	for _, c := range caches {
		if gr, own := c.groupResource(); own {
			m.need(gr, "list", "watch")
		}
	}
	m.grants.mu.Lock()
	defer m.grants.mu.Unlock()
	var rules []rbacv1.PolicyRule
	for gr, verbs := range m.grants.verbs {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{gr.Group},
			Resources: []string{gr.Resource},
			Verbs:     slices.Sorted(maps.Keys(verbs)),
		})
	}
	slices.SortFunc(rules, func(a, b rbacv1.PolicyRule) int {
		return cmp.Or(strings.Compare(a.APIGroups[0], b.APIGroups[0]), strings.Compare(a.Resources[0], b.Resources[0]))
	})
	return rules
}

func (c *Cache[T]) groupResource() (schema.GroupResource, bool) {
	return c.b.GVR.GroupResource(), !c.opts.Fleet
}
