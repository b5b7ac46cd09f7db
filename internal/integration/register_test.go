package integration_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// Gizmo and Gear are registered with their group, version and resource
// only: the manager learns the rest from discovery. Gizmos are namespaced
// with a status subresource, Gears cluster-scoped with one too.
type Gizmo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoSpec   `json:"spec"`
	Status            GizmoStatus `json:"status,omitzero"`
}

type GizmoSpec struct {
	Size int `json:"size"`
}

type GizmoStatus struct {
	Seen int `json:"seen,omitempty"`
}

func (g *Gizmo) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

type Gear struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GizmoStatus `json:"status,omitzero"`
}

func (g *Gear) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// GearNamespaced and GizmoNoScope declare what the server contradicts.
type GearNamespaced struct{ Gear }

func (g *GearNamespaced) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

type GizmoClusterScoped struct{ Gizmo }

func (g *GizmoClusterScoped) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := errors.Join(
		ctrl.Register[*Gizmo](ctrl.APIResource{Group: "discovered.example.com", Version: "v1", Resource: "gizmos"}),
		ctrl.Register[*Gear](ctrl.APIResource{Group: "discovered.example.com", Version: "v1", Resource: "gears"}),
		ctrl.Register[*GearNamespaced](ctrl.APIResource{Group: "discovered.example.com", Version: "v1", Resource: "gears", Kind: "Gear", Namespaced: true}),
		ctrl.Register[*GizmoClusterScoped](ctrl.APIResource{Group: "discovered.example.com", Version: "v1", Resource: "gizmos", Kind: "Gizmo", ClusterScoped: true}),
	)
	if err != nil {
		panic(err)
	}
}

const gizmoCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.discovered.example.com
spec:
  group: discovered.example.com
  scope: Namespaced
  names: {kind: Gizmo, listKind: GizmoList, plural: gizmos, singular: gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gears.discovered.example.com
spec:
  group: discovered.example.com
  scope: Cluster
  names: {kind: Gear, listKind: GearList, plural: gears, singular: gear}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

var installGizmosOnce = sync.OnceValue(func() error { return env.InstallCRDs([]byte(gizmoCRDs)) })

// TestRegisterFromDiscovery runs a controller of a type registered without
// its scope or status subresource: the manager learns both from discovery,
// and status writes go through the subresource. A cluster-scoped type works
// the same way without a namespace.
func TestRegisterFromDiscovery(t *testing.T) {
	must(t, installGizmosOnce())
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	gizmos := newClient[*Gizmo](t, mgr)
	gears := newClient[*Gear](t, mgr)
	_, err := ctrl.NewController(mgr, "gizmo-status", func(ctx context.Context, g *Gizmo) (ctrl.Result, error) {
		if g.Status.Seen == g.Spec.Size {
			return ctrl.Result{}, nil
		}
		g = g.DeepCopyObject().(*Gizmo)
		g.Status.Seen = g.Spec.Size
		g.Spec.Size = 100 // ignored by the status subresource
		_, err := gizmos.UpdateStatus(ctx, g)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)

	_, err = gizmos.Create(ctx, &Gizmo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g"}, Spec: GizmoSpec{Size: 3}})
	must(t, err)
	waitIdle(t, mgr)
	g, err := gizmos.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "g"})
	must(t, err)
	if g.Status.Seen != 3 || g.Spec.Size != 3 {
		t.Errorf("got spec.size %d, status.seen %d; want 3 and 3 (status written through the subresource)", g.Spec.Size, g.Status.Seen)
	}
	if _, err := gizmos.Create(ctx, &Gizmo{ObjectMeta: metav1.ObjectMeta{Name: "no-namespace"}}); err == nil ||
		!strings.Contains(err.Error(), "the resource is namespaced and the object has no namespace") {
		t.Errorf("create without a namespace: got %v, want the namespaced error", err)
	}

	gear, err := gears.Create(ctx, &Gear{ObjectMeta: metav1.ObjectMeta{GenerateName: "gear-"}})
	must(t, err)
	t.Cleanup(func() { _ = gears.Delete(context.Background(), ctrl.KeyOf(gear), metav1.DeleteOptions{}) })
	gear, err = gears.PatchStatus(ctx, ctrl.KeyOf(gear), types.MergePatchType, []byte(`{"status":{"seen":7}}`))
	must(t, err)
	if gear.Namespace != "" || gear.Status.Seen != 7 {
		t.Errorf("got gear %s with status.seen %d, want a cluster-scoped gear with 7", ctrl.KeyOf(gear), gear.Status.Seen)
	}
	waitIdle(t, mgr)
}

// TestRegisterDisagrees wires types whose declared scope the server
// contradicts: the wiring fails, naming the field and the server's answer.
func TestRegisterDisagrees(t *testing.T) {
	must(t, installGizmosOnce())
	mgr := newManager(t, newNamespace(t))
	_, err := ctrl.NewClient[*GearNamespaced](mgr, ctrl.ClientOptions{})
	if want := "APIResource.Namespaced is set, but the API server's gears.discovered.example.com is cluster-scoped"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("namespaced Gear: got %v, want an error containing %q", err, want)
	}
	_, err = ctrl.NewController(mgr, "gizmo", func(context.Context, *GizmoClusterScoped) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	if want := "APIResource.ClusterScoped is set, but the API server's gizmos.discovered.example.com is namespaced"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("cluster-scoped Gizmo: got %v, want an error containing %q", err, want)
	}
}
