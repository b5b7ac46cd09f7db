package integration_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// crudCase is the CRUD walk for one type: how to build an object, how to
// change it for Update, and patches of every kind with what each must do on
// the server.
type crudCase[T ctrl.Object] struct {
	object  func(ns, name string, labels map[string]string) T
	change  func(T)       // the change Update sends
	changed func(T) error // whether an object carries that change
	patches []patchCase[T]
}

type patchCase[T ctrl.Object] struct {
	name    string
	pt      types.PatchType
	data    string
	wantErr string        // the error Patch must return, if any
	check   func(T) error // the object on the server afterwards
}

func TestCRUD(t *testing.T) {
	t.Run("ConfigMap", func(t *testing.T) {
		testCRUD(t, crudCase[*corev1.ConfigMap]{
			object: func(ns, name string, labels map[string]string) *corev1.ConfigMap {
				return &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
					Data:       map[string]string{"k": "created"},
				}
			},
			change:  func(cm *corev1.ConfigMap) { cm.Data["k"] = "updated" },
			changed: func(cm *corev1.ConfigMap) error { return wantData(cm, "k", "updated") },
			patches: []patchCase[*corev1.ConfigMap]{
				{name: "merge", pt: types.MergePatchType, data: `{"data":{"merge":"yes"}}`,
					check: func(cm *corev1.ConfigMap) error { return wantData(cm, "k", "updated", "merge", "yes") }},
				{name: "JSON", pt: types.JSONPatchType, data: `[{"op":"add","path":"/data/json","value":"yes"}]`,
					check: func(cm *corev1.ConfigMap) error { return wantData(cm, "k", "updated", "merge", "yes", "json", "yes") }},
				{name: "strategic merge", pt: types.StrategicMergePatchType, data: `{"data":{"smp":"yes"}}`,
					check: func(cm *corev1.ConfigMap) error {
						return wantData(cm, "k", "updated", "merge", "yes", "json", "yes", "smp", "yes")
					}},
			},
		})
	})
	t.Run("Widget", func(t *testing.T) {
		testCRUD(t, crudCase[*Widget]{
			object: func(ns, name string, labels map[string]string) *Widget {
				w := newWidget(ns, name, 1)
				w.Labels = labels
				return w
			},
			change:  func(w *Widget) { w.Spec.Size = 2 },
			changed: func(w *Widget) error { return wantSize(w, 2) },
			patches: []patchCase[*Widget]{
				{name: "merge", pt: types.MergePatchType, data: `{"spec":{"size":3}}`,
					check: func(w *Widget) error { return wantSize(w, 3) }},
				{name: "JSON", pt: types.JSONPatchType, data: `[{"op":"replace","path":"/spec/size","value":4}]`,
					check: func(w *Widget) error { return wantSize(w, 4) }},
				{name: "strategic merge", pt: types.StrategicMergePatchType, data: `{"spec":{"size":5}}`,
					wantErr: "custom resources do not support strategic merge patch",
					check:   func(w *Widget) error { return wantSize(w, 4) }},
			},
		})
	})
}

// testCRUD walks c through Create, Get, List, Update, Patch and Delete, and
// checks each step on the server and in the cache.
func testCRUD[T ctrl.Object](t *testing.T, c crudCase[T]) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	client := newClient[T](t, mgr)
	live := client.Uncached()
	// With a cache of T from the start, the client's writes are tracked:
	// once WaitIdle returns, the cache holds what each write returned.
	_, err := ctrl.NewCache[T](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)

	a, err := client.Create(ctx, c.object(ns, "a", map[string]string{"app": "a"}))
	must(t, err)
	_, err = client.Create(ctx, c.object(ns, "b", map[string]string{"app": "b"}))
	must(t, err)
	if a.GetUID() == "" || a.GetResourceVersion() == "" || a.GetCreationTimestamp().Time.IsZero() {
		t.Fatalf("Create returned uid %q, resourceVersion %q, creationTimestamp %v: want the stored object",
			a.GetUID(), a.GetResourceVersion(), a.GetCreationTimestamp())
	}
	key := ctrl.KeyOf(a)
	waitIdle(t, mgr)

	reads := []struct {
		name   string
		client *ctrl.Client[T]
	}{{"cached", client}, {"live", live}}

	t.Run("Get", func(t *testing.T) {
		for _, r := range reads {
			got, err := r.client.Get(ctx, key)
			if err != nil {
				t.Errorf("%s: %v", r.name, err)
				continue
			}
			if got.GetUID() != a.GetUID() || got.GetResourceVersion() != a.GetResourceVersion() {
				t.Errorf("%s: got uid %s resourceVersion %s, want %s %s", r.name,
					got.GetUID(), got.GetResourceVersion(), a.GetUID(), a.GetResourceVersion())
			}
		}
	})

	t.Run("List", func(t *testing.T) {
		// A namesake with the same labels outside the manager's namespace.
		_, err := client.Create(ctx, c.object(newNamespace(t), "a", map[string]string{"app": "a"}))
		must(t, err)
		want := []string{key.String()}
		for _, r := range reads {
			// The zero Namespace means the manager's scope: ns.
			for _, listNS := range []string{ns, ""} {
				name := r.name + " in namespace"
				if listNS == "" {
					name = r.name + " in zero namespace"
				}
				t.Run(name, func(t *testing.T) {
					opts := ctrl.ListParams{Namespace: listNS, LabelSelector: labels.SelectorFromSet(labels.Set{"app": "a"})}
					got, err := r.client.List(ctx, opts)
					if err != nil {
						t.Fatal(err)
					}
					if keys := keys(got); !slices.Equal(keys, want) {
						t.Errorf("got %v, want %v", keys, want)
					}
				})
			}
		}
	})

	t.Run("Update", func(t *testing.T) {
		cur, err := live.Get(ctx, key)
		must(t, err)
		c.change(cur)
		updated, err := client.Update(ctx, cur)
		must(t, err)
		if updated.GetResourceVersion() == a.GetResourceVersion() {
			t.Errorf("Update returned resourceVersion %s, want a new one", updated.GetResourceVersion())
		}
		waitIdle(t, mgr)
		for _, r := range reads {
			got, err := r.client.Get(ctx, key)
			must(t, err)
			if got.GetResourceVersion() != updated.GetResourceVersion() {
				t.Errorf("%s: got resourceVersion %s, want %s", r.name, got.GetResourceVersion(), updated.GetResourceVersion())
			}
			if err := c.changed(got); err != nil {
				t.Errorf("%s: %v", r.name, err)
			}
		}
	})

	t.Run("Patch", func(t *testing.T) {
		for _, p := range c.patches {
			t.Run(p.name, func(t *testing.T) {
				_, err := client.Patch(ctx, key, p.pt, []byte(p.data))
				switch {
				case p.wantErr == "" && err != nil:
					t.Fatalf("got %v, want no error", err)
				case p.wantErr != "" && (err == nil || !strings.Contains(err.Error(), p.wantErr)):
					t.Fatalf("got error %v, want one containing %q", err, p.wantErr)
				}
				got, err := live.Get(ctx, key)
				must(t, err)
				if err := p.check(got); err != nil {
					t.Error(err)
				}
			})
		}
	})

	t.Run("Delete", func(t *testing.T) {
		wrongUID := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: new(types.UID("not-" + a.GetUID()))}}
		conflict := client.Delete(ctx, key, wrongUID)
		if !apierrors.IsConflict(conflict) {
			t.Errorf("Delete with another UID as precondition: got %v, want a conflict", conflict)
		}
		if got := ctrl.IgnoreNotFound(conflict); got != conflict {
			t.Errorf("IgnoreNotFound(conflict): got %v, want the conflict", got)
		}
		if _, err := live.Get(ctx, key); err != nil {
			t.Errorf("after a failed Delete: got %v, want the object", err)
		}
		rightUID := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: new(a.GetUID())}}
		must(t, client.Delete(ctx, key, rightUID))
		waitIdle(t, mgr)
		for _, r := range reads {
			_, err := r.client.Get(ctx, key)
			if !apierrors.IsNotFound(err) {
				t.Errorf("%s Get after Delete: got %v, want not found", r.name, err)
			}
			if err := ctrl.IgnoreNotFound(err); err != nil {
				t.Errorf("%s Get after Delete: IgnoreNotFound: got %v, want nil", r.name, err)
			}
		}
		err := client.Delete(ctx, key, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("second Delete: got %v, want not found", err)
		}
		if !strings.Contains(fmt.Sprint(err), key.String()) {
			t.Errorf("second Delete: got error %q, want it to name %s", err, key)
		}
	})
}

func TestUpdateStatus(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	ctx := start(t, mgr)
	w, err := widgets.Create(ctx, newWidget(ns, "w", 1))
	must(t, err)
	key := ctrl.KeyOf(w)

	// Each step writes a new size and a new phase in one object; the
	// server keeps only the half that the endpoint owns.
	steps := []struct {
		name      string
		write     func(w *Widget) (*Widget, error)
		size      int
		phase     string
		wantSize  int
		wantPhase string
		wantGen   int64
	}{
		{"UpdateStatus keeps the spec", func(w *Widget) (*Widget, error) { return widgets.UpdateStatus(ctx, w) }, 2, "Ready", 1, "Ready", 1},
		{"Update keeps the status", func(w *Widget) (*Widget, error) { return widgets.Update(ctx, w) }, 3, "Broken", 3, "Ready", 2},
		{"PatchStatus keeps the spec", func(w *Widget) (*Widget, error) {
			patch := fmt.Sprintf(`{"spec":{"size":%d},"status":{"phase":%q}}`, w.Spec.Size, w.Status.Phase)
			return widgets.PatchStatus(ctx, key, types.MergePatchType, []byte(patch))
		}, 4, "Patched", 3, "Patched", 2},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			cur, err := widgets.Uncached().Get(ctx, key)
			must(t, err)
			cur.Spec.Size, cur.Status.Phase = s.size, s.phase
			returned, err := s.write(cur)
			must(t, err)
			got, err := widgets.Uncached().Get(ctx, key)
			must(t, err)
			for _, r := range []struct {
				from string
				w    *Widget
			}{{"returned", returned}, {"server", got}} {
				if r.w.Spec.Size != s.wantSize || r.w.Status.Phase != s.wantPhase || r.w.Generation != s.wantGen {
					t.Errorf("%s: got size %d, phase %q, generation %d; want %d, %q, %d", r.from,
						r.w.Spec.Size, r.w.Status.Phase, r.w.Generation, s.wantSize, s.wantPhase, s.wantGen)
				}
			}
		})
	}

	t.Run("no status subresource", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
		_, err := newClient[*corev1.ConfigMap](t, mgr).UpdateStatus(ctx, cm)
		if want := "has no status subresource"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("UpdateStatus of a ConfigMap: got %v, want an error containing %q", err, want)
		}
	})
}

// wantData checks that cm has the key-value pairs kv, and nothing else.
func wantData(cm *corev1.ConfigMap, kv ...string) error {
	want := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	if fmt.Sprint(cm.Data) != fmt.Sprint(want) {
		return fmt.Errorf("ConfigMap %s: got data %v, want %v", cm.Name, cm.Data, want)
	}
	return nil
}

// wantSize checks a Widget's spec.size.
func wantSize(w *Widget, size int) error {
	if w.Spec.Size != size {
		return fmt.Errorf("Widget %s: got size %d, want %d", w.Name, w.Spec.Size, size)
	}
	return nil
}

// keys returns the sorted keys of objs.
func keys[T ctrl.Object](objs []T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, ctrl.KeyOf(o).String())
	}
	slices.Sort(out)
	return out
}
