package objects

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cm(ns, name, rv string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: labels}}
}

func keyOf(o metav1.Object) Key { return Key{Namespace: o.GetNamespace(), Name: o.GetName()} }

func names(objs []*corev1.ConfigMap) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	slices.Sort(out)
	return out
}

// TestIndexesFollowObjects checks that an index files objects added before
// and after it, moves an updated object, and forgets a removed one.
func TestIndexesFollowObjects(t *testing.T) {
	var s Store[*corev1.ConfigMap]
	a := cm("x", "a", "1", map[string]string{"app": "web"})
	s.Set(keyOf(a), a)
	if !s.AddIndex("app", func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} }) {
		t.Fatal("AddIndex: name taken in an empty store")
	}
	if s.AddIndex("app", nil) {
		t.Fatal("AddIndex twice: got true, want false")
	}
	b := cm("y", "b", "1", map[string]string{"app": "web"})
	s.Set(keyOf(b), b)
	if got, _ := s.ByIndex("", "app", "web", nil); !slices.Equal(names(got), []string{"x/a", "y/b"}) {
		t.Errorf("web in all namespaces: %v", names(got))
	}
	if got, _ := s.ByIndex("y", "app", "web", nil); !slices.Equal(names(got), []string{"y/b"}) {
		t.Errorf("web in y: %v", names(got))
	}
	a2 := cm("x", "a", "2", map[string]string{"app": "db"})
	s.Set(keyOf(a2), a2)
	s.Remove(keyOf(b))
	if got, _ := s.ByIndex("", "app", "web", nil); len(got) != 0 {
		t.Errorf("web after a moved and b left: %v", names(got))
	}
	if got, _ := s.ByIndex("", "app", "db", nil); !slices.Equal(names(got), []string{"x/a"}) {
		t.Errorf("db: %v", names(got))
	}
	if _, ok := s.ByIndex("", "none", "v", nil); ok {
		t.Error("ByIndex of a missing index: got ok")
	}
	if n := s.Len(); n != 1 {
		t.Errorf("Len: %d, want 1", n)
	}
	s.Clear()
	if got, _ := s.ByIndex("", "app", "db", nil); len(got) != 0 || s.Len() != 0 || !s.HasIndex("app") {
		t.Errorf("after Clear: %v, %d objects, index kept %v", names(got), s.Len(), s.HasIndex("app"))
	}
}

// TestInKeepsClustersApart checks In by cluster and namespace.
func TestInKeepsClustersApart(t *testing.T) {
	var s Store[*corev1.ConfigMap]
	for _, k := range []Key{{"x", "a", ""}, {"y", "b", ""}, {"x", "a", "east"}} {
		s.Set(k, cm(k.Namespace, k.Name, "1", nil))
	}
	count := func(cluster, ns string) (n int) {
		for range s.In(cluster, ns) {
			n++
		}
		return n
	}
	if got := [3]int{count("", ""), count("", "x"), count("east", "")}; got != [3]int{2, 1, 1} {
		t.Errorf("own cluster, own x, east: %v, want [2 1 1]", got)
	}
}

// TestExpectations walks writes through their observation: an update seen
// at its version, a deletion that replies before the store has the create,
// and a write the feed passed unseen.
func TestExpectations(t *testing.T) {
	var s Store[*corev1.ConfigMap]
	never := func(*corev1.ConfigMap) bool { return false }
	a := cm("x", "a", "5", nil)
	s.Set(keyOf(a), a)

	// An update, seen once the store has its version.
	s.Wrote(keyOf(a), cm("x", "a", "7", nil), false, "5", never)
	if !s.Pending(keyOf(a)) || s.Version(keyOf(a)) != "7" {
		t.Fatalf("after the update: pending %v version %q, want true 7", s.Pending(keyOf(a)), s.Version(keyOf(a)))
	}
	s.Observe(keyOf(a), cm("x", "a", "6", nil), true, false)
	if !s.Pending(keyOf(a)) {
		t.Fatal("an older version settled the update")
	}
	a7 := cm("x", "a", "7", nil)
	s.Set(keyOf(a7), a7)
	s.Observe(keyOf(a7), a7, true, false)
	if s.Pending(keyOf(a)) || !s.Holds(keyOf(a), a7) {
		t.Fatal("version 7 did not settle the update, or the store does not hold it")
	}

	// A create, then its deletion replying before the store has the create:
	// the create comes, then its deletion, which is waited for too.
	b := cm("x", "b", "8", nil)
	s.Wrote(keyOf(b), b, false, "7", never)
	s.Wrote(keyOf(b), nil, true, "7", never)
	if e, _ := s.Expecting(keyOf(b)); !e.Deleting || e.RV != "8" {
		t.Fatalf("delete before the create was seen: %+v, want deleting at 8", e)
	}
	s.Set(keyOf(b), b)
	s.Observe(keyOf(b), b, true, false)
	s.Settle(func(Key) string { return "9" })
	if !s.Pending(keyOf(b)) {
		t.Fatal("the create settled a wait for its deletion")
	}
	s.Remove(keyOf(b))
	s.Observe(keyOf(b), b, false, false)
	if s.Pending(keyOf(b)) {
		t.Fatal("the removal did not settle the deletion")
	}

	// A write outside the selector is not waited for; one the feed passed is settled.
	c := cm("x", "c", "10", nil)
	s.Wrote(keyOf(c), c, false, "9", func(*corev1.ConfigMap) bool { return true })
	if s.Pending(keyOf(c)) {
		t.Fatal("a write outside the selector is waited for")
	}
	s.Wrote(keyOf(c), c, false, "9", never)
	s.Settle(func(Key) string { return "11" })
	if s.Pending(keyOf(c)) || s.Expected() != 0 {
		t.Fatalf("a write the feed passed is still waited for (%d expected)", s.Expected())
	}

	// An update that leaves a deleted object without finalizers waits for
	// its removal once the store has the update, else for its version.
	now := metav1.NewTime(time.Now())
	gone := cm("x", "d", "13", nil)
	gone.DeletionTimestamp = &now
	s.Set(keyOf(gone), cm("x", "d", "12", nil))
	s.Wrote(keyOf(gone), gone, false, "12", never)
	if e, _ := s.Expecting(keyOf(gone)); e.Gone || e.String() != "resourceVersion 13" {
		t.Fatalf("removing update, store behind: waits for %s, want resourceVersion 13", e)
	}
	s.Set(keyOf(gone), gone)
	s.Wrote(keyOf(gone), gone, false, "13", never)
	if e, _ := s.Expecting(keyOf(gone)); !e.Gone || e.String() != "the removal" {
		t.Fatalf("removing update, store at it: waits for %s, want the removal", e)
	}
}

// TestIndexesForgetWhatTheyFiled checks that an object changed in place
// after it was filed (a reader that changed the cache's object) leaves no
// entry behind when it is replaced or removed: the index removes the values
// it filed the key under, not the values the object gives now.
func TestIndexesForgetWhatTheyFiled(t *testing.T) {
	var s Store[*corev1.ConfigMap]
	s.AddIndex("app", func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} })
	s.AddIndex("finalizers", func(o *corev1.ConfigMap) []string { return o.Finalizers })
	a := cm("x", "a", "1", map[string]string{"app": "web"})
	a.Finalizers = []string{"f"}
	s.Set(keyOf(a), a)
	a.Labels["app"] = "db" // in place, in the cache's object
	a.Finalizers[0] = "g"
	a2 := cm("x", "a", "2", map[string]string{"app": "db"})
	s.Set(keyOf(a2), a2)
	if got, _ := s.ByIndex("x", "app", "web", nil); len(got) != 0 {
		t.Errorf("web after the replacement: %v, want none", names(got))
	}
	if got, _ := s.ByIndex("x", "finalizers", "f", nil); len(got) != 0 {
		t.Errorf("finalizer f after the replacement: %v, want none", names(got))
	}
	if got, _ := s.ByIndex("x", "app", "db", nil); !slices.Equal(names(got), []string{"x/a"}) {
		t.Errorf("db: %v, want x/a", names(got))
	}
	a2.Labels["app"] = "cache"
	s.Remove(keyOf(a2))
	if got, _ := s.ByIndex("", "app", "db", nil); len(got) != 0 {
		t.Errorf("db after the removal: %v, want none", names(got))
	}
	for name, idx := range s.indexes {
		if len(idx.values) != 0 || len(idx.filed) != 0 {
			t.Errorf("index %s keeps %v and %v after every object left", name, idx.values, idx.filed)
		}
	}
}
