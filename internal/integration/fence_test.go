package integration_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// stall holds, below ctrl's fence, the first request that matches: it
// reads the request's body whole (so every check of the fence has passed,
// the last one on the body's read) and keeps the bytes until released, as
// a process paused between its last check and the wire keeps them. Then
// they leave, whatever became of the request's context meanwhile.
type stall struct {
	rt      http.RoundTripper
	match   func(*http.Request) bool
	held    chan struct{} // closed once the request is held
	release chan struct{}
	once    sync.Once
	// renewals fail while refuse is set: the leader's term runs out.
	refuse atomic.Bool
}

func (s *stall) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.refuse.Load() && req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/leases/") {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("renewal refused by the test")
	}
	hold := false
	if s.match(req) {
		s.once.Do(func() { hold = true })
	}
	if !hold {
		return s.rt.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	close(s.held)
	<-s.release
	out := req.Clone(context.WithoutCancel(req.Context()))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	return s.rt.RoundTrip(out)
}

// TestFencedWriteAfterPause: a leader's reconcile patches its object with a
// merge patch that carries no precondition of its own; its bytes stall
// after the fence's last check, its term runs out, and another holder
// writes the object. When the bytes leave, the API server refuses them:
// the patch carried the version the leader knew. The write is refused
// with ErrLeadershipLost, and the successor's write stands.
func TestFencedWriteAfterPause(t *testing.T) {
	ns := newNamespace(t)
	_, err := clientset.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, metav1.CreateOptions{})
	must(t, err)

	s := &stall{held: make(chan struct{}), release: make(chan struct{}), match: func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/configmaps/cm")
	}}
	cfg := rest.CopyConfig(env.Config())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { s.rt = rt; return s }
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, ShutdownTimeout: time.Minute,
		LeaderElection: ctrl.LeaderElection{Name: "fence", Namespace: ns, LeaseDuration: 3 * time.Second,
			RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}})
	must(t, err)
	cms := newClient[*corev1.ConfigMap](t, mgr)
	result := make(chan error, 1)
	var once sync.Once
	_, err = ctrl.NewController(mgr, "writer", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["writer"] != "" {
			return ctrl.Result{}, nil
		}
		_, err := cms.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(`{"metadata":{"annotations":{"writer":"old leader"}}}`))
		once.Do(func() { result <- err })
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	select {
	case <-s.held:
	case <-time.After(time.Minute):
		t.Fatal("the leader's patch never left")
	}
	// The term runs out while the patch's bytes wait.
	s.refuse.Store(true)
	deadline := time.After(time.Minute)
	for leading, changed := mgr.Leading(); leading; leading, changed = mgr.Leading() {
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the leader's term did not end with its renewals refused")
		}
	}
	// Another holder writes the object.
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(context.Background(), "cm", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"writer":"new leader"}}}`), metav1.PatchOptions{})
	must(t, err)
	close(s.release)

	select {
	case err := <-result:
		if !errors.Is(err, ctrl.ErrLeadershipLost) {
			t.Errorf("the stalled patch returned %v, want an error wrapping ErrLeadershipLost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stalled patch did not return")
	}
	cm, err := clientset.CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
	must(t, err)
	if got := cm.Annotations["writer"]; got != "new leader" {
		t.Errorf("writer %q after the stalled patch left, want the new leader's write to stand", got)
	}
	select {
	case err := <-stopped:
		if !errors.Is(err, ctrl.ErrLeadershipLost) {
			t.Errorf("Start returned %v, want an error wrapping ErrLeadershipLost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Start did not return after the leadership was lost")
	}
}
