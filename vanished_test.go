package ctrl_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
)

// TestVanishedDuringReconcile checks that a NotFound from a write to the
// object being reconciled ends the reconcile quietly when the object is
// gone, and that every other NotFound is an error that is retried.
func TestVanishedDuringReconcile(t *testing.T) {
	configMaps := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name string
		// write runs in the first reconcile of ns/a, with the fake and
		// the manager's clients.
		write     func(ctx context.Context, cs *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], secrets *ctrl.Client[*corev1.Secret], cm *corev1.ConfigMap) error
		wantCalls int
		wantQuiet bool
		// again: the object was created again; its deletion and creation
		// may reach the queue apart, the creation after a reconcile that
		// already read the new object from the cache (the cache holds an
		// object before its handlers hear of it), so one more reconcile
		// may follow.
		again bool
	}{
		{"own object deleted before its write", func(ctx context.Context, cs *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], _ *ctrl.Client[*corev1.Secret], cm *corev1.ConfigMap) error {
			must(t, cs.CoreV1().ConfigMaps("ns").Delete(ctx, "a", metav1.DeleteOptions{}))
			_, err := cms.Update(ctx, cm)
			return err
		}, 1, true, false},
		{"own object deleted and created again", func(ctx context.Context, cs *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], _ *ctrl.Client[*corev1.Secret], cm *corev1.ConfigMap) error {
			must(t, cs.CoreV1().ConfigMaps("ns").Delete(ctx, "a", metav1.DeleteOptions{}))
			again := configMap("ns", "a")
			again.UID = "new"
			_, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, again, metav1.CreateOptions{})
			must(t, err)
			// The fake checks no uid: answer as the server would.
			cs.PrependReactor("update", "configmaps", func(clienttesting.Action) (bool, kruntime.Object, error) {
				return true, nil, apierrors.NewNotFound(configMaps, "a")
			})
			_, err = cms.Update(ctx, cm)
			return err
		}, 2, true, true}, // the new object is reconciled too
		{"own object still there (a NotFound for another reason)", func(ctx context.Context, cs *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], _ *ctrl.Client[*corev1.Secret], cm *corev1.ConfigMap) error {
			_, err := cms.Patch(ctx, ctrl.KeyOf(cm), "application/merge-patch+json", []byte(`{}`))
			return err
		}, 2, false, false},
		{"another object of the type", func(ctx context.Context, _ *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], _ *ctrl.Client[*corev1.Secret], _ *corev1.ConfigMap) error {
			_, err := cms.Update(ctx, configMap("ns", "missing"))
			return err
		}, 2, false, false},
		{"the same key of another resource", func(ctx context.Context, _ *fake.Clientset, _ *ctrl.Client[*corev1.ConfigMap], secrets *ctrl.Client[*corev1.Secret], _ *corev1.ConfigMap) error {
			_, err := secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
			return err
		}, 2, false, false},
		{"a read of the own object", func(ctx context.Context, cs *fake.Clientset, cms *ctrl.Client[*corev1.ConfigMap], _ *ctrl.Client[*corev1.Secret], cm *corev1.ConfigMap) error {
			must(t, cs.CoreV1().ConfigMaps("ns").Delete(ctx, "a", metav1.DeleteOptions{}))
			_, err := cms.Uncached().Get(ctx, ctrl.KeyOf(cm))
			return err
		}, 1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var lines []string
				log := funcr.New(func(_, args string) {
					mu.Lock()
					lines = append(lines, args)
					mu.Unlock()
				}, funcr.Options{Verbosity: 1})
				cs := fake.NewClientset(configMap("ns", "a"))
				if strings.Contains(tt.name, "another reason") {
					first := true
					cs.PrependReactor("patch", "configmaps", func(clienttesting.Action) (bool, kruntime.Object, error) {
						if first {
							first = false
							return true, nil, apierrors.NewNotFound(configMaps, "a")
						}
						return false, nil, nil
					})
				}
				mgr := newManager(t, ctrl.Options{FakeClientset: cs, Logger: log})
				cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
				must(t, err)
				secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
				must(t, err)
				var calls atomic.Int32
				var lastUID atomic.Value
				_, err = ctrl.NewController(mgr, "vanish", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
					lastUID.Store(cm.UID)
					if calls.Add(1) == 1 {
						return ctrl.Result{}, tt.write(ctx, cs, cms, secrets, cm)
					}
					return ctrl.Result{}, nil
				}, ctrl.ControllerOptions{})
				must(t, err)
				start(t, mgr)
				time.Sleep(time.Hour) // fake time: every backoff has passed
				synctest.Wait()

				switch got := int(calls.Load()); {
				case tt.again && (got < tt.wantCalls || got > tt.wantCalls+1 || lastUID.Load() != types.UID("new")):
					t.Errorf("got %d reconciles, the last of uid %v; want %d or %d, the last of the new object", got, lastUID.Load(), tt.wantCalls, tt.wantCalls+1)
				case !tt.again && got != tt.wantCalls:
					t.Errorf("got %d reconciles, want %d", got, tt.wantCalls)
				}
				wantErrors := 1.0
				if tt.wantQuiet {
					wantErrors = 0
				}
				series := `controller_runtime_reconcile_errors_total{controller="vanish"}`
				if got := metricValue(t, mgr.Registry(), series); got != wantErrors {
					t.Errorf("%s: got %v, want %v", series, got, wantErrors)
				}
				mu.Lock()
				defer mu.Unlock()
				var failed, quiet bool
				for _, l := range lines {
					failed = failed || strings.Contains(l, `"msg"="reconcile failed`)
					quiet = quiet || strings.Contains(l, `"msg"="the object was deleted during its reconcile`)
				}
				if failed == tt.wantQuiet || quiet != tt.wantQuiet {
					t.Errorf("got an error log line %v and a V(1) line %v, want %v and %v: %q", failed, quiet, !tt.wantQuiet, tt.wantQuiet, lines)
				}
			})
		})
	}
}
