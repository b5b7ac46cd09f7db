package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// applyCase is a server-side apply contest: alice applies first and owns
// some fields, bob applies a different value to one of them.
type applyCase[T ctrl.Object] struct {
	alice, bob T
	// contested is the field both claim, aliceOnly one only alice sets,
	// both in managedFields notation ("f:data.f:a").
	contested, aliceOnly string
	// afterAlice and afterBob check the object on the server after
	// alice's apply and after bob's forced one.
	afterAlice, afterBob func(T) error
}

func TestApply(t *testing.T) {
	t.Run("ConfigMap", func(t *testing.T) {
		ns := newNamespace(t)
		cm := func(data map[string]string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "applied"}, Data: data}
		}
		testApply(t, ns, applyCase[*corev1.ConfigMap]{
			alice:      cm(map[string]string{"a": "alice", "b": "alice"}),
			bob:        cm(map[string]string{"a": "bob", "c": "bob"}),
			contested:  "f:data.f:a",
			aliceOnly:  "f:data.f:b",
			afterAlice: func(cm *corev1.ConfigMap) error { return wantData(cm, "a", "alice", "b", "alice") },
			afterBob:   func(cm *corev1.ConfigMap) error { return wantData(cm, "a", "bob", "b", "alice", "c", "bob") },
		})
	})
	t.Run("Widget", func(t *testing.T) {
		ns := newNamespace(t)
		alice := newWidget(ns, "applied", 1)
		alice.Labels = map[string]string{"team": "alice"}
		testApply(t, ns, applyCase[*Widget]{
			alice:      alice,
			bob:        newWidget(ns, "applied", 2),
			contested:  "f:spec.f:size",
			aliceOnly:  "f:metadata.f:labels.f:team",
			afterAlice: func(w *Widget) error { return wantSize(w, 1) },
			afterBob: func(w *Widget) error {
				if w.Labels["team"] != "alice" {
					return fmt.Errorf("got labels %v, want alice's team label kept", w.Labels)
				}
				return wantSize(w, 2)
			},
		})
	})
}

func testApply[T ctrl.Object](t *testing.T, ns string, c applyCase[T]) {
	mgr := newManager(t, ns)
	client := newClient[T](t, mgr)
	ctx := context.Background() // Apply does not need a started manager
	key := ctrl.KeyOf(c.alice)

	if _, err := client.Apply(ctx, c.alice, ctrl.ApplyParams{FieldManager: "alice"}); err != nil {
		t.Fatalf("alice's apply: %v", err)
	}
	got, err := client.Uncached().Get(ctx, key)
	must(t, err)
	if err := c.afterAlice(got); err != nil {
		t.Errorf("after alice's apply, which creates: %v", err)
	}

	_, err = client.Apply(ctx, c.bob, ctrl.ApplyParams{FieldManager: "bob"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "alice") {
		t.Errorf("bob's apply without force: got %v, want a conflict with alice", err)
	}
	got, err = client.Uncached().Get(ctx, key)
	must(t, err)
	if err := c.afterAlice(got); err != nil {
		t.Errorf("after bob's failed apply: %v", err)
	}

	if _, err := client.Apply(ctx, c.bob, ctrl.ApplyParams{FieldManager: "bob", Force: true}); err != nil {
		t.Fatalf("bob's forced apply: %v", err)
	}
	got, err = client.Uncached().Get(ctx, key)
	must(t, err)
	if err := c.afterBob(got); err != nil {
		t.Errorf("after bob's forced apply: %v", err)
	}
	owned := appliedFields(got.GetManagedFields())
	for _, w := range []struct {
		manager, field string
		want           bool
	}{
		{"alice", c.aliceOnly, true},
		{"alice", c.contested, false},
		{"bob", c.contested, true},
	} {
		if got := ownsField(owned[w.manager], w.field); got != w.want {
			t.Errorf("%s owns %s: got %t, want %t (managedFields %v)", w.manager, w.field, got, w.want, owned)
		}
	}
}

// appliedFields returns, for each manager with an Apply entry, the fields it
// owns as JSON.
func appliedFields(entries []metav1.ManagedFieldsEntry) map[string]string {
	out := map[string]string{}
	for _, e := range entries {
		if e.Operation == metav1.ManagedFieldsOperationApply && e.FieldsV1 != nil {
			out[e.Manager] = string(e.FieldsV1.Raw)
		}
	}
	return out
}

// ownsField reports whether the fieldsV1 JSON fields holds path, a field
// path in managedFields notation: "f:data.f:a" is {"f:data":{"f:a":{}}}.
func ownsField(fields, path string) bool {
	var node any
	if err := json.Unmarshal([]byte(fields), &node); err != nil {
		return false
	}
	for _, part := range strings.Split(path, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return false
		}
		if node, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
