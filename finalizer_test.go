package ctrl_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
)

// TestFinalizeOnce checks OnFinalize's promise that finalize runs once per
// deletion while the process lives: not again when the removal of the
// finalizer conflicts and is retried, nor when the key comes up again
// before the cache shows the removal.
func TestFinalizeOnce(t *testing.T) {
	for _, tt := range []struct {
		name     string
		conflict bool // the first removal of the finalizer conflicts
		requeue  bool // finalize queues its key again
	}{
		{"removal conflicts", true, false},
		{"queued again meanwhile", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(configMap("ns", "a"))
			var conflicts atomic.Int32
			cs.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				removal := bytes.Contains(a.(clienttesting.PatchAction).GetPatch(), []byte(`"finalizers":null`))
				if tt.conflict && removal && conflicts.Add(1) == 1 {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "a", nil)
				}
				return false, nil, nil
			})
			mgr := newManager(t, ctrl.Options{FakeClientset: cs})
			c, err := ctrl.NewController(mgr, "finalizer", noop, ctrl.ControllerOptions{})
			must(t, err)
			var finalized atomic.Int32
			must(t, c.OnFinalize("example.com/cleanup", func(ctx context.Context, cm *corev1.ConfigMap) error {
				finalized.Add(1)
				if tt.requeue {
					c.Enqueue(ctrl.KeyOf(cm))
				}
				return nil
			}))
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			must(t, err)
			ctx := start(t, mgr)
			waitIdle(t, mgr)
			key := ctrl.Key{Namespace: "ns", Name: "a"}
			must(t, cms.Delete(ctx, key)) // the fake holds it while the finalizer remains
			waitIdle(t, mgr)
			if got := finalized.Load(); got != 1 {
				t.Errorf("finalize ran %d times, want once", got)
			}
			if _, err := cms.Uncached().Get(ctx, key); !apierrors.IsNotFound(err) {
				t.Errorf("after finalizing: got %v, want the object gone with its last finalizer", err)
			}
			if tt.conflict && conflicts.Load() < 2 {
				t.Errorf("%d removals, want the conflict and its retry", conflicts.Load())
			}
		})
	}
}
