package ctrl_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// TestTypeMeta checks that objects from caches, from reconciles and from
// every kind of client read and write carry their apiVersion and kind,
// which the fakes (like the API server's typed decoding) leave out.
func TestTypeMeta(t *testing.T) {
	cs := fake.NewClientset(configMap("ns", "a"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs})
	reconciled := make(chan metav1.TypeMeta, 10)
	c, err := ctrl.NewController(mgr, "kinds", func(_ context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		reconciled <- cm.TypeMeta
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	client, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	want := metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	check := func(what string, got metav1.TypeMeta) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
	}
	check("reconcile", <-reconciled)
	cached, ok := c.Cache().Get(ctrl.Key{Namespace: "ns", Name: "a"})
	if !ok {
		t.Fatal("not cached")
	}
	check("Cache.Get", cached.TypeMeta)
	got, err := client.Get(ctx, ctrl.Key{Namespace: "ns", Name: "a"})
	must(t, err)
	check("Client.Get", got.TypeMeta)
	got, err = client.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "a"})
	must(t, err)
	check("uncached Client.Get", got.TypeMeta)
	list, err := client.Uncached().List(ctx, ctrl.ListParams{})
	must(t, err)
	check("uncached Client.List", list[0].TypeMeta)
	created, err := client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}})
	must(t, err)
	check("Client.Create", created.TypeMeta)
	created.Data = map[string]string{"k": "v"}
	updated, err := client.Update(ctx, created)
	must(t, err)
	check("Client.Update", updated.TypeMeta)
	patched, err := client.Patch(ctx, ctrl.KeyOf(created), "application/merge-patch+json", []byte(`{"data":{"k":"w"}}`))
	must(t, err)
	check("Client.Patch", patched.TypeMeta)
	waitIdle(t, mgr)
	list, err = client.List(ctx, ctrl.ListParams{})
	must(t, err)
	for _, cm := range list {
		check("Client.List "+cm.Name, cm.TypeMeta)
	}
}

func TestReferenceOfErrors(t *testing.T) {
	type unregistered struct{ Widget }
	for name, tt := range map[string]struct {
		ref  func() error
		want string
	}{
		"nil": {func() error { _, err := ctrl.ReferenceOf[*corev1.ConfigMap](nil); return err }, "ctrl: ReferenceOf *v1.ConfigMap: nil object"},
		"unregistered": {func() error { _, err := ctrl.ReferenceOf(&unregistered{}); return err },
			"ctrl: ReferenceOf: *ctrl_test.unregistered is not a known resource"},
		"unstructured without a kind": {func() error { _, err := ctrl.ReferenceOf(&unstructured.Unstructured{}); return err },
			"has no apiVersion and kind"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tt.ref(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	u.SetNamespace("ns")
	u.SetName("web")
	ref, err := ctrl.ReferenceOf(u)
	must(t, err)
	if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Namespace != "ns" || ref.Name != "web" {
		t.Errorf("got %+v, want the unstructured object's own kind", ref)
	}
}
