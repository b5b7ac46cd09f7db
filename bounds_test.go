package ctrl

import (
	"context"
	"testing"

	"github.com/typedctrl/ctrl/internal/objects"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The per-key maps a long-running process keeps are bounded by the objects
// that exist: these tests look inside, where nothing outside can.

func boundsManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(Options{FakeClientset: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBookmarkSettlesExpectations checks that a bookmark past a write that
// the cache will never see settles its expectation, in a program that
// never calls WaitIdle.
func TestBookmarkSettlesExpectations(t *testing.T) {
	c, err := NewCache[*corev1.ConfigMap](boundsManager(t), CacheOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &feed[*corev1.ConfigMap]{c: c, b: c.b} // as the running cache has it
	c.feeds.Store(&map[feedKey]*feed[*corev1.ConfigMap]{{}: f})
	f.lastRV = "10"
	key := Key{Namespace: "ns", Name: "left"}
	c.items.Expect(objects.Key(key), objects.Expectation{RV: "12"})
	if err := f.Bookmark("11"); err != nil || c.items.Expected() != 1 {
		t.Fatalf("bookmark before the write: %v, %d expectations; want the write still expected", err, c.items.Expected())
	}
	if err := f.Bookmark("13"); err != nil || c.items.Expected() != 0 {
		t.Errorf("bookmark past the write: %v, %d expectations; want none", err, c.items.Expected())
	}
}

// TestAwaitingForgottenOnRemoval checks that a key whose reconcile waits
// for its own write is forgotten when its object leaves the cache, and
// that the marks of two clusters' objects of the same name are apart.
func TestAwaitingForgottenOnRemoval(t *testing.T) {
	m := boundsManager(t)
	c, err := NewController(m, "await", func(context.Context, *corev1.ConfigMap) (Result, error) { return Result{}, nil }, ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	east, west := Key{Namespace: "ns", Name: "a", Cluster: "east"}, Key{Namespace: "ns", Name: "a", Cluster: "west"}
	for _, k := range []Key{east, west} {
		c.cache.items.Expect(objects.Key(k), objects.Expectation{Writes: 1}) // a write not yet seen
		if !c.awaitOwnWrite(k, &Causes{}) {
			t.Fatalf("awaitOwnWrite(%s): got false, want true while the write is pending", k)
		}
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = "ns", "a"
	c.changed(event[*corev1.ConfigMap]{kind: deleted, key: east, obj: cm})
	if _, ok := c.awaiting[east]; ok || len(c.awaiting) != 1 || c.nAwaiting.Load() != 1 {
		t.Errorf("after east's object left: awaiting %v (count %d), want only west's", c.awaiting, c.nAwaiting.Load())
	}
}
