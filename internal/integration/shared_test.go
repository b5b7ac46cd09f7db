package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/internal/shared"
)

// TestSharedObjectChanged: on the API server of ctrltest, a reconcile that
// sets a label on the object it was handed, the cache's own, fails
// WaitIdle naming the controller, the key and metadata.labels; the cache
// holds the server's object again, and the controller that copies first
// writes the label.
func TestSharedObjectChanged(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	buggy, err := ctrl.NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Labels["team"] != "" {
			return ctrl.Result{}, nil
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["team"] = "a" // the cache's object
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "buggy"})}})
	must(t, err)
	_, err = ctrl.NewController(mgr, "copying-labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Labels["team"] != "" {
			return ctrl.Result{}, nil
		}
		cm = cm.DeepCopy() // the fix: change a copy
		cm.Labels["team"] = "a"
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "fixed"})}})
	must(t, err)
	ctx := start(t, mgr)
	for name, app := range map[string]string{"buggy": "buggy", "fixed": "fixed"} {
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}}})
		must(t, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = mgr.WaitIdle(wctx, time.Second)
	for _, want := range []string{`controller "labeler"`, "ConfigMap " + ns + "/buggy", "at metadata.labels"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("WaitIdle: %v, want an error naming %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "copying-labeler") {
		t.Errorf("WaitIdle: %v, want no error of the controller that copies", err)
	}
	cached, ok := buggy.Cache().Get(ctrl.Key{Namespace: ns, Name: "buggy"})
	server, gerr := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "buggy"})
	must(t, gerr)
	if !ok || cached.Labels["team"] != server.Labels["team"] || cached.ResourceVersion != server.ResourceVersion {
		t.Errorf("cache holds labels %v at %s, the server %v at %s", cached.Labels, cached.ResourceVersion, server.Labels, server.ResourceVersion)
	}
	fixed, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "fixed"})
	must(t, err)
	if fixed.Labels["team"] != "a" {
		t.Errorf("the controller that copies left labels %v", fixed.Labels)
	}
}

// failFirst answers the first request match takes with a 500, as an API
// server whose etcd timed out does, and passes the others on.
type failFirst struct {
	rt     http.RoundTripper
	match  func(*http.Request) bool
	failed atomic.Bool
}

func (f *failFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.match(req) && f.failed.CompareAndSwap(false, true) {
		if req.Body != nil {
			req.Body.Close()
		}
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}`
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Proto: "HTTP/2.0", ProtoMajor: 2,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	return f.rt.RoundTrip(req)
}

// TestFailedUpdateOfSharedObject: as a production binary runs it (only
// some reconciles checked), a reconcile ported from controller-runtime
// labels the object it was handed, the cache's own, and updates it; the
// API server answers the first update with a 500. The change reaches the
// server: the retry reads the server's object, not the changed one.
func TestFailedUpdateOfSharedObject(t *testing.T) {
	saved := shared.InTest
	shared.InTest = func() bool { return false }
	defer func() { shared.InTest = saved }()
	ns := newNamespace(t)
	const n = 150 // past the first 100 reconciles, which are checked
	createConfigMaps(t, ns, n, 8, func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%03d", i), Labels: map[string]string{"app": "web"}}}
	})
	const name = "cm-042"
	fail := &failFirst{match: func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/configmaps/"+name)
	}}
	cfg := rest.CopyConfig(env.Config())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { fail.rt = rt; return fail }
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	_, err = ctrl.NewController(mgr, "habit", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if cm.Annotations["move"] == "" || cm.Labels["app"] == "db" {
			return ctrl.Result{}, nil
		}
		cm.Labels["app"] = "db" // the habit: the cache's object
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	must(t, mgr.WaitIdle(wctx, time.Second))
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"move":"yes"}}}`), metav1.PatchOptions{})
	must(t, err)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && cm.Labels["app"] == "db", err
	})
	if !fail.failed.Load() {
		t.Fatal("no update failed: the test tests nothing")
	}
	if err != nil {
		cm, _ := clientset.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		t.Fatalf("the server holds labels %v a minute after the update failed, want app=db: %v", cm.Labels, err)
	}
	must(t, mgr.WaitIdle(wctx, time.Second))
}
