package ctrl

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A forbidden list or watch is no outage: retrying will not help until the
// permission is granted, so it is reported at once (the Told guarantee) and
// every forbiddenReminder while it lasts.
const forbiddenReminder = time.Minute

type denials struct {
	mu       sync.Mutex
	m        map[string]*denial
	probed   bool // the list permission was checked
	rechecks sync.WaitGroup
	log      logr.Logger
	ctx      context.Context
}

func (d *denials) start(ctx context.Context, log logr.Logger) {
	d.mu.Lock()
	d.ctx, d.log = ctx, log
	d.mu.Unlock()
}

type denial struct {
	err    error // the server's answer, last seen
	since  time.Time
	logged time.Time
	count  int
}

// access logs a refusal at once and every minute, a permission after a refusal once.
func (f *feed[T]) access(verb string, err error) {
	forbidden := apierrors.IsForbidden(err)
	if err != nil && !forbidden {
		return
	}
	f.denied.mu.Lock()
	defer f.denied.mu.Unlock()
	d, was := f.denied.m[verb]
	now := time.Now()
	switch {
	case !forbidden && was:
		delete(f.denied.m, verb)
		f.denied.log.Info("allowed now", "verb", verb, "forbiddenFor", now.Sub(d.since).Round(time.Second).String())
	case !forbidden:
	case !was:
		if f.denied.m == nil {
			f.denied.m = map[string]*denial{}
		}
		d = &denial{err: err, since: now, logged: now, count: 1}
		f.denied.m[verb] = d
		f.denied.log.Error(f.forbiddenErr(verb, d), "forbidden: grant the RBAC rule; retrying meanwhile")
		if verb == "list" && f.denied.ctx != nil {
			f.denied.rechecks.Go(f.recheckList)
		}
	default:
		d.err = err
		d.count++
		if now.Sub(d.logged) >= forbiddenReminder {
			d.logged = now
			f.denied.log.Error(f.forbiddenErr(verb, d), "still forbidden: grant the RBAC rule; retrying meanwhile",
				"attempts", d.count, "for", now.Sub(d.since).Round(time.Second).String())
		}
	}
}

// probeList asks for one object before the first streamed list: a cache
// that lists by watching would otherwise miss a missing list permission.
func (f *feed[T]) probeList(ctx context.Context) {
	f.denied.mu.Lock()
	probed := f.denied.probed
	f.denied.probed = true
	f.denied.mu.Unlock()
	if !probed {
		_, err := f.b.List(ctx, f.key.namespace, f.options(metav1.ListOptions{Limit: 1}))
		f.access("list", err)
	}
}

// recheckList asks for one object every forbiddenReminder while the list is
// refused: a cache whose watch works lists no more and would not notice.
func (f *feed[T]) recheckList() {
	t := time.NewTicker(forbiddenReminder)
	defer t.Stop()
	for {
		select {
		case <-f.denied.ctx.Done():
			return
		case <-t.C:
		}
		f.denied.mu.Lock()
		_, denied := f.denied.m["list"]
		f.denied.mu.Unlock()
		if !denied {
			return
		}
		_, err := f.b.List(f.denied.ctx, f.key.namespace, f.options(metav1.ListOptions{Limit: 1}))
		if f.denied.ctx.Err() != nil {
			return
		}
		f.access("list", err)
	}
}

// forbidden returns the feed's refusal now, the list's first, or nil.
func (f *feed[T]) forbidden() error {
	for _, verb := range []string{"list", "watch"} {
		if err := f.forbiddenTo(verb); err != nil {
			return err
		}
	}
	return nil
}

func (f *feed[T]) forbiddenTo(verb string) error {
	f.denied.mu.Lock()
	defer f.denied.mu.Unlock()
	if d := f.denied.m[verb]; d != nil {
		return f.forbiddenErr(verb, d)
	}
	return nil
}

// forbiddenErr names the refusal and the rule to add, wrapping the answer.
func (f *feed[T]) forbiddenErr(verb string, d *denial) error {
	gr := f.b.GVR.GroupResource()
	rule := fmt.Sprintf(`{apiGroups: [%q], resources: [%q], verbs: [%q]}`, gr.Group, gr.Resource, verb)
	var where, to string
	switch {
	case !f.b.Namespaced:
		to = "a ClusterRole"
	case f.key.namespace == "":
		where, to = " in all namespaces", "a ClusterRole"
	default:
		where, to = fmt.Sprintf(" in namespace %q", f.key.namespace), fmt.Sprintf("a Role in namespace %q, or a ClusterRole,", f.key.namespace)
	}
	if f.key.cluster != "" {
		where += fmt.Sprintf(" of cluster %q", f.key.cluster)
	}
	return fmt.Errorf("forbidden to %s %s%s: add the rule %s to %s bound to the manager's identity: %w", verb, gr, where, rule, to, d.err)
}

// forbidden returns why the own cluster refuses the cache a list or watch, or nil.
func (c *Cache[T]) forbidden() error {
	for _, f := range c.ownFeeds() {
		if err := f.forbidden(); err != nil {
			return err
		}
	}
	return nil
}

// notReady says why the cache is not ready (unsynced, or forbidden to watch), or "".
func (c *Cache[T]) notReady() string {
	if !c.HasSynced() {
		if err := c.forbidden(); err != nil {
			return err.Error()
		}
		if last := c.lastError(); last != nil {
			return "not synced: " + last.Error()
		}
		return "not synced yet"
	}
	for _, f := range c.ownFeeds() {
		if err := f.forbiddenTo("watch"); err != nil {
			return err.Error()
		}
	}
	if c.opt == nil && !c.Served() {
		return fmt.Sprintf("not served: %v", c.lastError()) // its CRD was deleted
	}
	return ""
}

// warning says what the server refuses a ready cache (a list it watched around), or "".
func (c *Cache[T]) warning() string {
	if c.notReady() != "" {
		return ""
	}
	if err := c.forbidden(); err != nil {
		return err.Error()
	}
	return ""
}

// grants are the RBAC verbs the manager needs beyond its caches.
type grants struct {
	mu    sync.Mutex
	verbs map[schema.GroupResource]map[string]bool
}

// need records that the manager needs verbs on the resource gr.
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
// cache; Leases (get, create, update; delete for sharding) and patch of
// the objects sharding's label mode labels; Events (create, update, patch)
// for recorders; patch of objects whose finalizers a controller or machine
// owns and of machines' status; create of TokenReviews and
// SubjectAccessReviews for secure metrics. Add your reconciles' writes and
// uncached reads (the webhook server needs none). Call it after wiring;
// safe for concurrent use.
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
