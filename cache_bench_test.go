package ctrl

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
			c.items.set(KeyOf(cm), cm)
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
			for k, obj := range c.items.all() {
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
