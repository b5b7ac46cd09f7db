package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestHasher runs the controller against client-go's fake clientset: the
// ConfigMap gets its hash.
func TestHasher(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
		Data: map[string]string{"color": "blue"}}
	// Started now, wired by setup, its log in the test's output; stopped
	// and checked for leftover goroutines when the test ends.
	mgr := ctrltest.StartManager(t, ctrl.Options{
		FakeClientset: fake.NewClientset(cm), // serves built-in types, seeded with cm
	}, setup)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the test's deadline
	defer cancel()

	// Idle: every write made through the manager's clients is back in its
	// caches and reconciled. No sleeps. A reconcile that keeps failing
	// fails the wait, naming the ConfigMap and its error.
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := configMaps.Get(ctx, ctrl.KeyOf(cm))
	if err != nil {
		t.Fatal(err)
	}
	if want := "741505a39f7c558f"; got.Annotations["example.com/hash"] != want { // sha256("color=blue\n")
		t.Errorf("example.com/hash: got %q, want %q", got.Annotations["example.com/hash"], want)
	}
}
