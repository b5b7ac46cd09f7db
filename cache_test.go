package ctrl_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

func names[T ctrl.Object](objs []T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, ctrl.KeyOf(o).String())
	}
	slices.Sort(out)
	return out
}

func labeled(ns, name string, l map[string]string) *corev1.ConfigMap {
	cm := configMap(ns, name)
	cm.Labels = l
	cm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	return cm
}

func TestCacheScopes(t *testing.T) {
	cs := fake.NewClientset(
		labeled("a", "x", map[string]string{"app": "web"}),
		labeled("a", "y", map[string]string{"app": "db"}),
		labeled("b", "z", map[string]string{"app": "web"}),
	)
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	all, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	again, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	if again != all {
		t.Error("NewCache with equal options returned a second cache, want the shared one")
	}
	inA, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Namespaces: []string{"a"}})
	must(t, err)
	web, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "web"})})
	must(t, err)
	kept, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Namespaces: []string{"b"}, KeepManagedFields: true})
	must(t, err)
	ctx := start(t, mgr)
	for _, c := range []*ctrl.Cache[*corev1.ConfigMap]{all, inA, web, kept} {
		must(t, c.WaitForSync(ctx))
	}

	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"all", names(all.List("", nil)), []string{"a/x", "a/y", "b/z"}},
		{"namespace a", names(inA.List("", nil)), []string{"a/x", "a/y"}},
		{"label selector", names(web.List("", nil)), []string{"a/x", "b/z"}},
		{"List filters by namespace", names(all.List("b", nil)), []string{"b/z"}},
		{"List filters by labels", names(all.List("", labels.SelectorFromSet(labels.Set{"app": "db"}))), []string{"a/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Equal(tt.got, tt.want) {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}

	x, ok := all.Get(ctrl.Key{Namespace: "a", Name: "x"})
	if !ok || x.ManagedFields != nil {
		t.Errorf("got %v (found %t), want a/x without managedFields", x, ok)
	}
	z, ok := kept.Get(ctrl.Key{Namespace: "b", Name: "z"})
	if !ok || len(z.ManagedFields) != 1 {
		t.Errorf("KeepManagedFields: got %v (found %t), want b/z with its managedFields", z, ok)
	}

	// A change that takes an object out of a label-selected cache removes it,
	// even though the fake's watch ignores selectors.
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	x = x.DeepCopy()
	x.Labels["app"] = "db"
	_, err = client.Update(ctx, x)
	must(t, err)
	waitIdle(t, mgr)
	if got := names(web.List("", nil)); !slices.Equal(got, []string{"b/z"}) {
		t.Errorf("after relabeling a/x: got %v, want [b/z]", got)
	}
}

func TestCacheIndexAndTransform(t *testing.T) {
	cs := fake.NewClientset(
		labeled("a", "x", map[string]string{"tier": "1"}),
		labeled("a", "y", map[string]string{"tier": "2"}),
	)
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	cache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	must(t, cache.AddIndex("tier", func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["tier"]} }))
	if err := cache.AddIndex("tier", func(*corev1.ConfigMap) []string { return nil }); err == nil {
		t.Error("AddIndex with a taken name: got no error")
	}
	must(t, cache.SetTransform(func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		cm.Data = map[string]string{"transformed": "yes"}
		return cm
	}))
	if err := cache.SetTransform(func(cm *corev1.ConfigMap) *corev1.ConfigMap { return cm }); err == nil {
		t.Error("second SetTransform: got no error")
	}
	if _, err := cache.ByIndex("", "nope", "x"); err == nil {
		t.Error("ByIndex on a missing index: got no error")
	}
	ctx := start(t, mgr)
	must(t, cache.WaitForSync(ctx))

	byTier := func(v string) []string {
		objs, err := cache.ByIndex("", "tier", v)
		must(t, err)
		return names(objs)
	}
	if got := byTier("1"); !slices.Equal(got, []string{"a/x"}) {
		t.Errorf("tier 1: got %v, want [a/x]", got)
	}
	x, _ := cache.Get(ctrl.Key{Namespace: "a", Name: "x"})
	if x.Data["transformed"] != "yes" {
		t.Errorf("got data %v, want the transform's", x.Data)
	}

	// Index entries follow updates and deletions.
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	x = x.DeepCopy()
	x.Labels["tier"] = "2"
	_, err = client.Update(ctx, x)
	must(t, err)
	must(t, client.Delete(ctx, ctrl.Key{Namespace: "a", Name: "y"}, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	if got := byTier("1"); len(got) != 0 {
		t.Errorf("tier 1 after update: got %v, want none", got)
	}
	if got := byTier("2"); !slices.Equal(got, []string{"a/x"}) {
		t.Errorf("tier 2 after update and delete: got %v, want [a/x]", got)
	}
	// An index added after the cache filled indexes what is there.
	must(t, cache.AddIndex("name", func(cm *corev1.ConfigMap) []string { return []string{cm.Name} }))
	if objs, _ := cache.ByIndex("", "name", "x"); len(objs) != 1 {
		t.Errorf("late index: got %d objects, want 1", len(objs))
	}
}

func TestWaitForSyncCanceled(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset()})
	cache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cache.WaitForSync(ctx); err == nil {
		t.Error("WaitForSync on a canceled context before Start: got no error")
	}
	if cache.HasSynced() {
		t.Error("HasSynced before Start: got true")
	}
}
