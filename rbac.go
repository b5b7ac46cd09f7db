package ctrl

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RBACRules returns the rules the manager needs in its own cluster, as
// wired so far, one per resource, sorted: list and watch per cache; Leases
// (get, create, update; delete for a ring) and patch of the objects a
// ring's label mode labels; Events (create, update, patch) for recorders;
// patch of owned finalizers and machines' status; create of TokenReviews
// and SubjectAccessReviews for secure metrics; webhooks need none; and
// what [Manager.AddRBACRules] added (rules with resource names or
// non-resource URLs last, as added). Call it after wiring.
func (m *Manager) RBACRules() []rbacv1.PolicyRule {
	m.mu.Lock()
	caches := slices.Clone(m.cacheList)
	m.mu.Unlock()
	if m.opts.MetricsAddress != "" && !m.opts.MetricsServing.Insecure {
		m.grants.Need(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "create")
		m.grants.Need(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "create")
	}
	for _, c := range caches {
		if gr, own := c.groupResource(); own {
			m.grants.Need(gr, "list", "watch")
		}
	}
	return m.grants.Rules()
}

func (c *Cache[T]) groupResource() (schema.GroupResource, bool) {
	return c.b.GVR.GroupResource(), !c.opts.Fleet
}

// AddRBACRules adds rules that the manager's wiring cannot see: the writes
// of the reconciles and their reads outside the caches. Call it in the
// setup function, beside the clients that need them, so that
// [Manager.RBACRules] and ctrltest.Manifests include them.
func (m *Manager) AddRBACRules(rules ...rbacv1.PolicyRule) { m.grants.Add(rules...) }
