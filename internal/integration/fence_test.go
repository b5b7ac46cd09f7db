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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	sent   atomic.Int32 // requests that matched
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
		s.sent.Add(1)
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

// TestFencedWriteAfterPause: a leader's reconcile writes its object with a
// write that names no resourceVersion of its own (a merge patch, a JSON
// patch, a forced server-side apply, a delete); its bytes stall after the
// fence's last check, its term runs out, and another holder writes the
// object. When the bytes leave, the API server refuses them: the write
// carried the version the leader knew. The write returns ErrLeadershipLost,
// and the successor's write stands.
//
// While the term runs, the same refusal is not the caller's: the write is
// sent again at the server's version and succeeds; a JSON patch that the
// server refuses for its own operations returns that refusal.
func TestFencedWriteAfterPause(t *testing.T) {
	for _, kind := range []string{"merge", "json", "apply", "delete"} {
		t.Run(kind, func(t *testing.T) { fencedWriteAfterPause(t, kind, true) })
		t.Run(kind+" while leading", func(t *testing.T) { fencedWriteAfterPause(t, kind, false) })
	}
	t.Run("bad json", func(t *testing.T) { fencedWriteAfterPause(t, "bad json", false) })
}

func fencedWriteAfterPause(t *testing.T, kind string, lose bool) {
	ns := newNamespace(t)
	_, err := clientset.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, metav1.CreateOptions{})
	must(t, err)

	s := &stall{held: make(chan struct{}), release: make(chan struct{}), match: func(r *http.Request) bool {
		return (r.Method == http.MethodPatch || r.Method == http.MethodDelete) && strings.HasSuffix(r.URL.Path, "/configmaps/cm")
	}}
	cfg := rest.CopyConfig(env.Config())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { s.rt = rt; return s }
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, ShutdownTimeout: time.Minute,
		LeaderElection: ctrl.LeaderElection{
			Name:         "fence",
			LeaseOptions: ctrl.LeaseOptions{Namespace: ns, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond},
		}})
	must(t, err)
	cms := newClient[*corev1.ConfigMap](t, mgr)
	write := func(ctx context.Context, cm *corev1.ConfigMap) error {
		var err error
		switch kind {
		case "merge":
			_, err = cms.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(`{"metadata":{"annotations":{"writer":"old leader"}}}`))
		case "json":
			_, err = cms.Patch(ctx, ctrl.KeyOf(cm), types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/annotations","value":{"writer":"old leader"}}]`))
		case "bad json":
			_, err = cms.Patch(ctx, ctrl.KeyOf(cm), types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/missing"}]`))
		case "apply":
			_, err = cms.Apply(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name,
				Annotations: map[string]string{"writer": "old leader"}}}, ctrl.ApplyParams{Force: true})
		case "delete":
			err = cms.Delete(ctx, ctrl.KeyOf(cm))
		}
		return err
	}
	result := make(chan error, 1)
	var once sync.Once
	_, err = ctrl.NewController(mgr, "writer", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["writer"] != "" {
			return ctrl.Result{}, nil
		}
		err := write(ctx, cm)
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
		t.Fatal("the leader's write never left")
	}
	if lose {
		// The term runs out while the write's bytes wait.
		s.refuse.Store(true)
		deadline := time.After(time.Minute)
		for leading, changed := mgr.Leading(); leading; leading, changed = mgr.Leading() {
			select {
			case <-changed:
			case <-deadline:
				t.Fatal("the leader's term did not end with its renewals refused")
			}
		}
	}
	// Another holder writes the object.
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(context.Background(), "cm", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"writer":"new leader"}}}`), metav1.PatchOptions{})
	must(t, err)
	close(s.release)

	var got error
	select {
	case got = <-result:
	case <-time.After(time.Minute):
		t.Fatalf("the stalled %s did not return", kind)
	}
	cm, err := clientset.CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
	if !lose {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Start: %v", err)
		}
		if n := s.sent.Load(); n != 2 {
			t.Errorf("the %s was sent %d times, want twice: refused for its version, then sent at the server's", kind, n)
		}
		switch {
		case kind == "bad json":
			if !apierrors.IsInvalid(got) {
				t.Errorf("a JSON patch the server refuses for its operations returned %v, want that refusal", got)
			}
		case got != nil:
			t.Errorf("the %s, refused for the version it carried while the term ran, returned %v, want it sent again", kind, got)
		case kind == "delete" && !apierrors.IsNotFound(err):
			t.Errorf("after the delete sent again: %v, want the object gone", err)
		case kind != "delete" && (err != nil || cm.Annotations["writer"] != "old leader"):
			t.Errorf("after the %s sent again: %v, writer %q, want the leader's write", kind, err, cm.Annotations["writer"])
		}
		return
	}
	if !errors.Is(got, ctrl.ErrLeadershipLost) {
		t.Errorf("the stalled %s returned %v, want an error wrapping ErrLeadershipLost", kind, got)
	}
	switch {
	case err != nil:
		t.Errorf("after the stalled %s left: %v, want the new leader's write to stand", kind, err)
	case cm.Annotations["writer"] != "new leader":
		t.Errorf("writer %q after the stalled %s left, want the new leader's write to stand", cm.Annotations["writer"], kind)
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
