package ctrltest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestStartManager runs a controller whose reconcile always fails the way
// a test should (StartManager, then WaitIdle with a deadline of its own):
// the wait fails within its deadline naming the key and its error, the
// manager's log reaches the test, and the manager is stopped at cleanup.
func TestStartManager(t *testing.T) {
	boom := errors.New("boom")
	tb := &recordingTB{TB: t}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	mgr := ctrltest.StartManager(tb, ctrl.Options{FakeClientset: fake.NewClientset(cm)}, func(mgr *ctrl.Manager) error {
		_, err := ctrl.NewController(mgr, "always-failing", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
			return ctrl.Result{}, boom
		}, ctrl.ControllerOptions{})
		return err
	})
	const window = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	start := time.Now()
	err := mgr.WaitIdle(ctx, time.Minute) // retries due within the minute: busy until ctx ends
	if took := time.Since(start); took > window+time.Second {
		t.Errorf("WaitIdle took %s, want about %s", took, window)
	}
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `controller "always-failing": default/settings failed`) {
		t.Errorf("got %v, want an error naming default/settings and its error", err)
	}
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	if err := mgr.WaitIdle(context.Background(), time.Minute); err == nil || !strings.Contains(err.Error(), "manager stopped") {
		t.Errorf("after cleanup: got %v, want the manager stopped", err)
	}
	if got := tb.logged(); !strings.Contains(got, `"reconcile failed; retrying with backoff"`) {
		t.Errorf("got log lines:\n%s\nwant the failed reconciles", got)
	}
}
