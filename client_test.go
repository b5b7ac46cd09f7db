package ctrl_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

func TestClient(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "a")), FakeDynamic: newWidgetFake()})
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	ws, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	must(t, err)
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)
	key := ctrl.Key{Namespace: "ns", Name: "a"}

	got, err := cms.Get(ctx, key)
	must(t, err)
	got.Data = map[string]string{"mine": "yes"} // the caller's copy
	again, err := cms.Get(ctx, key)
	must(t, err)
	if again.Data != nil {
		t.Error("Get returned an object shared with the cache")
	}

	_, err = cms.Get(ctx, ctrl.Key{Namespace: "ns", Name: "missing"})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "*v1.ConfigMap ns/missing") {
		t.Errorf("Get of a missing object: got %v, want NotFound naming the type and key", err)
	}
	if ctrl.IgnoreNotFound(err) != nil {
		t.Errorf("IgnoreNotFound(%v): got non-nil", err)
	}
	if other := errors.New("x"); ctrl.IgnoreNotFound(other) != other {
		t.Error("IgnoreNotFound changed another error")
	}

	patched, err := cms.Patch(ctx, key, types.StrategicMergePatchType, []byte(`{"data":{"k":"v"}}`))
	must(t, err)
	if patched.Data["k"] != "v" {
		t.Errorf("strategic merge patch: got data %v", patched.Data)
	}
	applied, err := cms.Apply(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}, Data: map[string]string{"x": "1"}},
		ctrl.ApplyParams{FieldManager: "test"})
	must(t, err)
	if applied.Data["x"] != "1" {
		t.Errorf("apply: got data %v", applied.Data)
	}
	waitIdle(t, mgr)
	live, err := cms.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "b"})
	must(t, err)
	cached, err := cms.Get(ctx, ctrl.Key{Namespace: "ns", Name: "b"})
	must(t, err)
	if live.Data["x"] != "1" || cached.Data["x"] != "1" {
		t.Errorf("after apply: live %v, cached %v, want x=1 in both", live.Data, cached.Data)
	}
	list, err := cms.List(ctx, ctrl.ListParams{Namespace: "ns"})
	must(t, err)
	if len(list) != 2 {
		t.Errorf("List: got %d objects, want 2", len(list))
	}

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil object", func() error { _, err := cms.Create(ctx, nil); return err }(), "create *v1.ConfigMap: nil object"},
		{"no status subresource", func() error { _, err := cms.UpdateStatus(ctx, configMap("ns", "a")); return err }(), "has no status subresource"},
		{"strategic merge on a custom resource", func() error {
			_, err := ws.Patch(ctx, ctrl.Key{Namespace: "ns", Name: "w"}, types.StrategicMergePatchType, []byte(`{}`))
			return err
		}(), "custom resources do not support strategic merge patch"},
		{"apply through Patch", func() error {
			_, err := cms.Patch(ctx, key, types.ApplyPatchType, []byte(`{}`))
			return err
		}(), "use Client.Apply"},
		{"create existing", func() error { _, err := cms.Create(ctx, configMap("ns", "a")); return err }(), "already exists"},
		{"delete missing", cms.Delete(ctx, ctrl.Key{Namespace: "ns", Name: "missing"}, metav1.DeleteOptions{}), "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", tt.err, tt.want)
			}
		})
	}
	// Failed writes leave nothing to wait for.
	waitIdle(t, mgr)
}

// TestClientWithoutCache checks that a cached read no cache covers is an
// error that says what to do, and that a client never creates a cache.
func TestClientWithoutCache(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("other", "a")), Namespace: "ns"})
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "web"})})
	must(t, err)
	ctx := start(t, mgr)
	want := `no cache of *v1.ConfigMap (configmaps) holds other/a (caches: *v1.ConfigMap (configmaps) in namespace "ns" with labels "app=web"): add one with ctrl.NewCache, or read with Client.Uncached`
	if _, err := cms.Get(ctx, ctrl.Key{Namespace: "other", Name: "a"}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("cached Get outside every cache:\ngot  %v\nwant %s", err, want)
	}
	if _, err := cms.List(ctx, ctrl.ListParams{}); err == nil || !strings.Contains(err.Error(), `holds namespace "ns"`) {
		t.Errorf("cached List outside every cache: got %v, want an error naming the namespace", err)
	}
	if _, err := cms.Uncached().Get(ctx, ctrl.Key{Namespace: "other", Name: "a"}); err != nil {
		t.Errorf("live Get outside the manager's namespace: %v", err)
	}
	var _ context.Context = ctx
}

// TestKeyWithoutNamespace checks every verb that takes a key: for a
// namespaced type, a key without a namespace is an error that says so,
// never a NotFound that reads like success.
func TestKeyWithoutNamespace(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(configMap("ns", "x"))})
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	nodes, err := ctrl.NewClient[*corev1.Node](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	key := ctrl.Key{Name: "x"}
	patch := []byte(`{"data":{"k":"v"}}`)
	for _, tt := range []struct {
		verb string
		call func() error
	}{
		{"get", func() error { _, err := cms.Get(ctx, key); return err }},
		{"get", func() error { _, err := cms.Uncached().Get(ctx, key); return err }},
		{"patch", func() error { _, err := cms.Patch(ctx, key, types.MergePatchType, patch); return err }},
		{"patch status of", func() error { _, err := cms.PatchStatus(ctx, key, types.MergePatchType, patch); return err }},
		{"delete", func() error { return cms.Delete(ctx, key, metav1.DeleteOptions{}) }},
		{"create or patch", func() error {
			_, _, err := cms.CreateOrPatch(ctx, key, func(*corev1.ConfigMap) error { return nil })
			return err
		}},
		{"patch", func() error {
			old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
			changed := old.DeepCopy()
			changed.Data = map[string]string{"k": "v"}
			_, err := cms.PatchFrom(ctx, old, changed)
			return err
		}},
	} {
		err := tt.call()
		if want := "ctrl: " + tt.verb + " *v1.ConfigMap x: the resource is namespaced and the key has no namespace"; err == nil || err.Error() != want || apierrors.IsNotFound(err) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	// A cluster-scoped type needs none.
	if _, err := nodes.Uncached().Get(ctx, ctrl.Key{Name: "n"}); !apierrors.IsNotFound(err) {
		t.Errorf("get of a missing Node: got %v, want NotFound", err)
	}
}

// TestLostCreateRecognized checks how Create settles a create whose reply
// was lost: a retry that finds the object that create made returns it, and
// one that finds an object of the same name made by anyone else, even with
// the same field manager and after the lost attempt, is AlreadyExists.
func TestLostCreateRecognized(t *testing.T) {
	lostReply := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/ns/configmaps",
		Err: &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}
	for _, tt := range []struct {
		name     string
		happened bool // the lost create reached the server
		wantErr  bool
	}{
		{"the lost create happened", true, false},
		{"someone else created it", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			var creates atomic.Int32
			cs.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if creates.Add(1) > 1 {
					return false, nil, nil // the tracker answers
				}
				if tt.happened {
					obj := a.(clienttesting.CreateAction).GetObject()
					if err := cs.Tracker().Create(a.GetResource(), obj, "ns"); err != nil {
						return true, nil, err
					}
				} else {
					// Another program, with the same field manager, creates
					// the object meanwhile.
					other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a",
						CreationTimestamp: metav1.Now()}, Data: map[string]string{"by": "other"}}
					if err := cs.Tracker().Create(a.GetResource(), other, "ns"); err != nil {
						return true, nil, err
					}
				}
				return true, nil, lostReply
			})
			mgr := newManager(t, ctrl.Options{FakeClientset: cs})
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			must(t, err)
			ctx := context.Background()
			mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Data: map[string]string{"by": "me"}}
			if _, err := cms.Create(ctx, mine); !errors.Is(err, lostReply.Err) {
				t.Fatalf("first create: got %v, want the lost reply", err)
			}
			if mine.Annotations != nil {
				t.Errorf("Create changed the caller's object: annotations %v", mine.Annotations)
			}
			got, err := cms.Create(ctx, mine)
			switch {
			case tt.wantErr && !apierrors.IsAlreadyExists(err):
				t.Errorf("retry: got %v, %v; want AlreadyExists", got, err)
			case !tt.wantErr && (err != nil || got.Data["by"] != "me"):
				t.Errorf("retry: got %v, %v; want the object the lost create made", got, err)
			}
		})
	}
}

// TestCreateOrPatchAfterCreate calls CreateOrPatch when the object was
// created after its read (as a reconcile may, before the cache has the
// child it created a moment ago): the create meets AlreadyExists, and
// CreateOrPatch patches what the server holds instead of failing. On a
// custom resource with a status subresource and on a ConfigMap.
func TestCreateOrPatchAfterCreate(t *testing.T) {
	t.Run("ConfigMap", func(t *testing.T) {
		cs := fake.NewClientset()
		mgr := ctrltest.StartManager(t, ctrl.Options{FakeClientset: cs}, nil)
		cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
		must(t, err)
		_, err = ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
		must(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		must(t, mgr.WaitIdle(ctx, time.Minute))
		key := ctrl.Key{Namespace: "ns", Name: "child"}
		calls := 0
		got, op, err := cms.CreateOrPatch(ctx, key, func(cm *corev1.ConfigMap) error {
			if calls++; calls == 1 { // between the read and the create
				_, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child"},
					Data: map[string]string{"theirs": "x"}}, metav1.CreateOptions{})
				must(t, err)
			}
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data["mine"] = "1"
			return nil
		})
		if err != nil || op != ctrl.Patched || got.Data["mine"] != "1" || got.Data["theirs"] != "x" {
			t.Errorf("got %s, data %v, error %v; want patched, mine=1 and theirs=x", op, got.Data, err)
		}
		live, err := cms.Uncached().Get(ctx, key)
		must(t, err)
		if live.Data["mine"] != "1" || live.Data["theirs"] != "x" {
			t.Errorf("on the server: got data %v, want mine=1 and theirs=x", live.Data)
		}
	})
	t.Run("status subresource", func(t *testing.T) {
		dyn := ctrltest.NewFakeDynamic()
		mgr := ctrltest.StartManager(t, ctrl.Options{FakeDynamic: dyn}, nil)
		widgets, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
		must(t, err)
		_, err = ctrl.NewCache[*Widget](mgr, ctrl.CacheOptions{})
		must(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		must(t, mgr.WaitIdle(ctx, time.Minute))
		key := ctrl.Key{Namespace: "ns", Name: "w"}
		calls := 0
		got, op, err := widgets.CreateOrPatch(ctx, key, func(w *Widget) error {
			if calls++; calls == 1 {
				_, err := widgets.Uncached().Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: WidgetSpec{Size: 1}})
				must(t, err)
			}
			w.Spec.Size = 2
			w.Status.Phase = "Ready"
			return nil
		})
		if err != nil || op != ctrl.Patched || got.Spec.Size != 2 || got.Status.Phase != "Ready" {
			t.Errorf("got %s, %+v, error %v; want patched, size 2 and Ready", op, got, err)
		}
	})
}
