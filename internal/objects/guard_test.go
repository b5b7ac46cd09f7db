package objects

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGuard(t *testing.T) {
	var s Store[*corev1.ConfigMap]
	cm := func(name, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": v}}
	}
	a, b := Key{Namespace: "ns", Name: "a"}, Key{Namespace: "ns", Name: "b"}
	s.Set(a, cm("a", "1")) // stored before Guard: copied by it
	var found []string
	s.Guard(func(c *corev1.ConfigMap) *corev1.ConfigMap { return c.DeepCopy() },
		func(x, y *corev1.ConfigMap) string {
			if maps.Equal(x.Data, y.Data) {
				return ""
			}
			return "data"
		},
		func(k Key, path string) { found = append(found, k.Name+" "+path) })
	s.Set(b, cm("b", "1"))

	if s.Check() || len(found) != 0 {
		t.Fatalf("Check found %v in objects nobody changed", found)
	}
	s.Set(a, cm("a", "2")) // replaced, not changed in place
	if len(found) != 0 {
		t.Fatalf("a replacement was reported: %v", found)
	}
	obj, _ := s.Get(a)
	obj.Data["k"] = "changed"
	s.Set(a, cm("a", "3"))
	if len(found) != 1 || found[0] != "a data" {
		t.Fatalf("found %v, want the change to a when it was replaced", found)
	}
	obj, _ = s.Get(b)
	obj.Data["k"] = "changed"
	if !s.Check() || len(found) != 2 || found[1] != "b data" {
		t.Fatalf("Check found %v, want b's change", found)
	}
	if now, _ := s.Get(b); now.Data["k"] != "1" {
		t.Errorf("Check left b with data %v, want it restored", now.Data)
	}
	obj, _ = s.Get(a)
	restored := obj.DeepCopy()
	obj.Data["k"] = "changed again"
	if !s.Replace(a, obj, restored) || len(found) != 2 {
		t.Fatalf("Replace: found %v, want nothing new", found)
	}
	if s.Check() {
		t.Errorf("Check found a change after Replace restored it")
	}
	obj, _ = s.Get(b)
	obj.Data["k"] = "changed before removal"
	s.Remove(b)
	if len(found) != 3 || found[2] != "b data" {
		t.Fatalf("found %v, want b's change when it was removed", found)
	}
}
