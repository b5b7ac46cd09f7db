package ctrl

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/objects"
)

// BenchmarkCacheList lists one namespace's 100 ConfigMaps out of a cache of
// 100,000 in 1,000 namespaces, as a reconcile that lists its children does:
// "namespace" is Cache.List, whose objects are kept by namespace;
// "scan" is what it did before, every cached object looked at.
func BenchmarkCacheList(b *testing.B) {
	const namespaces, perNamespace = 1000, 100
	c := &Cache[*corev1.ConfigMap]{}
	for n := range namespaces {
		for i := range perNamespace {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", n), Name: fmt.Sprintf("cm-%d", i),
				Labels: map[string]string{"app": fmt.Sprint(i % 10)}}}
			c.items.Set(objects.Key(KeyOf(cm)), cm)
		}
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "3"})
	b.Run("namespace", func(b *testing.B) {
		for b.Loop() {
			if got := len(c.List("ns-500", sel)); got != perNamespace/10 {
				b.Fatalf("listed %d", got)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			var out []*corev1.ConfigMap
			for k, obj := range c.items.All() {
				if k.Namespace == "ns-500" && sel.Matches(labels.Set(obj.Labels)) {
					out = append(out, obj)
				}
			}
			if len(out) != perNamespace/10 {
				b.Fatalf("listed %d", len(out))
			}
		}
	})
}

// BenchmarkTypeMeta measures what giving objects back their apiVersion and
// kind costs the cache: "stamp" is the stamp alone, "update" the store's
// whole handling of one watch event (prepare, stamp included, store, index,
// dispatch to no handler), for one Deployment updated over and over.
func BenchmarkTypeMeta(b *testing.B) {
	bd, err := binding.For[*appsv1.Deployment](binding.Clients{Clientset: fake.NewClientset()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	tm := typeMetaOf(bd.Info)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "1",
		Labels: map[string]string{"app": "web"}}}
	b.Run("stamp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			stamp(d, tm)
		}
	})
	b.Run("update", func(b *testing.B) {
		c := &Cache[*appsv1.Deployment]{mgr: &Manager{}, b: bd, typeMeta: tm}
		f := &feed[*appsv1.Deployment]{c: c, b: bd}
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Update(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
