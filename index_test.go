package ctrl_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// TestNamespacedIndex checks that index lookups find objects within one
// namespace or across all, with values that do not encode the namespace,
// through the cache (shared objects) and the client (copies), and that the
// index follows updates and deletions.
func TestNamespacedIndex(t *testing.T) {
	cs := fake.NewClientset(
		labeled("a", "x", map[string]string{"app": "web", "tier": "1"}),
		labeled("a", "y", map[string]string{"app": "web", "tier": "2"}),
		labeled("b", "x", map[string]string{"app": "web", "tier": "1"}),
		labeled("b", "z", map[string]string{"app": "db"}),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "red"}}},
	)
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	cache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	must(t, cache.AddIndex("app", func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["app"]} }))
	namespaces, err := ctrl.NewCache[*corev1.Namespace](mgr, ctrl.CacheOptions{})
	must(t, err)
	must(t, namespaces.AddIndex("team", func(ns *corev1.Namespace) []string { return []string{ns.Labels["team"]} }))
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	lookups := []struct {
		namespace, value string
		selector         labels.Selector
		want             []string
	}{
		{"a", "web", nil, []string{"a/x", "a/y"}},
		{"b", "web", nil, []string{"b/x"}},
		{"", "web", nil, []string{"a/x", "a/y", "b/x"}},
		{"", "db", nil, []string{"b/z"}},
		{"c", "web", nil, nil},
		{"a", "none", nil, nil},
		{"", "web", labels.SelectorFromSet(labels.Set{"tier": "1"}), []string{"a/x", "b/x"}},
	}
	check := func(when string) {
		t.Helper()
		for _, l := range lookups {
			if l.selector == nil {
				objs, err := cache.ByIndex(l.namespace, "app", l.value)
				must(t, err)
				if got := names(objs); !slices.Equal(got, l.want) {
					t.Errorf("%s: ByIndex(%q, app, %q): got %v, want %v", when, l.namespace, l.value, got, l.want)
				}
			}
			objs, err := client.List(ctx, ctrl.ListParams{Namespace: l.namespace, Index: "app", IndexValue: l.value, LabelSelector: l.selector})
			must(t, err)
			if got := names(objs); !slices.Equal(got, l.want) {
				t.Errorf("%s: List(%q, app=%q, %v): got %v, want %v", when, l.namespace, l.value, l.selector, got, l.want)
			}
			for _, o := range objs {
				if shared, _ := cache.Get(ctrl.KeyOf(o)); shared == o {
					t.Errorf("%s: List returned the cached %s itself, want a copy", when, ctrl.KeyOf(o))
				}
			}
		}
	}
	check("after the list")

	// b/x leaves app=web, b/z joins it, a/y goes: the index follows.
	bx, _ := cache.Get(ctrl.Key{Namespace: "b", Name: "x"})
	bx = bx.DeepCopy()
	bx.Labels["app"] = "db"
	_, err = client.Update(ctx, bx)
	must(t, err)
	bz, _ := cache.Get(ctrl.Key{Namespace: "b", Name: "z"})
	bz = bz.DeepCopy()
	bz.Labels = map[string]string{"app": "web", "tier": "1"}
	_, err = client.Update(ctx, bz)
	must(t, err)
	must(t, client.Delete(ctx, ctrl.Key{Namespace: "a", Name: "y"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	lookups = []struct {
		namespace, value string
		selector         labels.Selector
		want             []string
	}{
		{"a", "web", nil, []string{"a/x"}},
		{"b", "web", nil, []string{"b/z"}},
		{"", "web", nil, []string{"a/x", "b/z"}},
		{"", "db", nil, []string{"b/x"}},
	}
	check("after updates and a deletion")

	// A cluster-scoped type has one namespace: "".
	objs, err := namespaces.ByIndex("", "team", "red")
	must(t, err)
	if got := names(objs); !slices.Equal(got, []string{"a"}) {
		t.Errorf("cluster-scoped: got %v, want [a]", got)
	}

	for name, tt := range map[string]struct {
		err  error
		want string
	}{
		"a namespace of a cluster-scoped type": {func() error { _, err := namespaces.ByIndex("a", "team", "red"); return err }(),
			`ctrl: index "team" of *v1.Namespace (namespaces): the resource is cluster-scoped`},
		"no such index": {func() error { _, err := cache.ByIndex("a", "nope", "x"); return err }(),
			`ctrl: *v1.ConfigMap (configmaps) has no index "nope"`},
		"a list by a missing index": {func() error {
			_, err := client.List(ctx, ctrl.ListParams{Namespace: "a", Index: "nope", IndexValue: "x"})
			return err
		}(), `no cache of *v1.ConfigMap (configmaps) that holds namespace "a" has index "nope" (caches: *v1.ConfigMap (configmaps)): add it with Cache.AddIndex`},
		"an uncached list by an index": {func() error {
			_, err := client.Uncached().List(ctx, ctrl.ListParams{Index: "app", IndexValue: "web"})
			return err
		}(), `index "app": indexes are in caches`},
	} {
		t.Run(name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", tt.err, tt.want)
			}
		})
	}
}
