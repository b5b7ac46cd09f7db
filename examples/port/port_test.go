package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// fakeRegistry resolves tags from a map, and counts the calls.
type fakeRegistry struct {
	mu      sync.Mutex
	digests map[string]string // image -> digest
	calls   int
}

func (r *fakeRegistry) resolve(_ context.Context, image string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	d, ok := r.digests[image]
	if !ok {
		return "", fmt.Errorf("no such image %s", image)
	}
	return "registry.example.com/web@" + d, nil
}

func (r *fakeRegistry) set(image, digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.digests[image] = digest
}

func (r *fakeRegistry) called() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// TestPort runs the ctrl half of the port against client-go's fakes: a
// labeled ConfigMap gets its Deployment, pinned to the tag's digest; a
// trigger on the channel pins it again after the tag moved; a status write
// on the Deployment does not reconcile the app, and a spec change does, and
// is undone.
func TestPort(t *testing.T) {
	defer goleak.VerifyNone(t) // after the manager and the trigger goroutine stopped
	app := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name), Labels: labels},
			Data: map[string]string{"image": "registry.example.com/web:stable", "replicas": "2"}}
	}
	clientset := fake.NewClientset(app("web", map[string]string{managedLabel: "true"}), app("unmanaged", nil))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset})
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeRegistry{digests: map[string]string{"registry.example.com/web:stable": "sha256:1111"}}
	triggers := make(chan ctrl.Key)
	defer close(triggers) // ends the goroutine that turns triggers into Enqueue calls
	if err := setup(mgr, triggers, reg.resolve); err != nil {
		t.Fatal(err)
	}
	deployments, err := ctrl.NewClient[*appsv1.Deployment](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	waitIdle := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	key := ctrl.Key{Namespace: "default", Name: "web"}
	image := func() (string, error) {
		d, err := deployments.Get(ctx, key)
		if err != nil {
			return "", err
		}
		if n := *d.Spec.Replicas; n != 2 {
			return "", fmt.Errorf("got %d replicas, want 2", n)
		}
		return d.Spec.Template.Spec.Containers[0].Image, nil
	}

	waitIdle()
	if got, err := image(); err != nil || got != "registry.example.com/web@sha256:1111" {
		t.Errorf("got image %q, %v; want the first digest", got, err)
	}
	d, err := deployments.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "ConfigMap" || ref.Name != "web" {
		t.Errorf("got controller %+v, want ConfigMap web", ref)
	}
	if _, err := deployments.Get(ctx, ctrl.Key{Namespace: "default", Name: "unmanaged"}); err == nil {
		t.Error("got a Deployment for the unlabeled ConfigMap, want none")
	}

	// The tag moves; the webhook receiver sends the app's key. The
	// channel's goroutine calls Enqueue after WaitIdle may have looked, so
	// poll for the result.
	reg.set("registry.example.com/web:stable", "sha256:2222")
	triggers <- key
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := image()
		if err == nil && got == "registry.example.com/web@sha256:2222" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got image %q, %v after the trigger; want the second digest", got, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the cache, not waiting for the controller
	}
	waitIdle()

	// A status write: filtered out, so no registry call.
	calls := reg.called()
	if _, err := deployments.PatchStatus(ctx, key, types.MergePatchType, []byte(`{"status":{"readyReplicas":2}}`)); err != nil {
		t.Fatal(err)
	}
	waitIdle()
	if got := reg.called(); got != calls {
		t.Errorf("a status write reconciled the app: %d registry calls, want %d", got, calls)
	}
	// A spec change, generation and all (the fake does not bump it):
	// reconciled, and undone.
	if _, err := deployments.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"generation":2},"spec":{"replicas":5}}`)); err != nil {
		t.Fatal(err)
	}
	waitIdle()
	if got := reg.called(); got == calls {
		t.Error("a spec change did not reconcile the app")
	}
	if _, err := image(); err != nil {
		t.Errorf("after the spec change: %v", err)
	}
}
