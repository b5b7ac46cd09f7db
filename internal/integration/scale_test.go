package integration_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// podSummary is a projection of Pods: what a controller of Pods reads.
type podSummary struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Image string
}

func (p *podSummary) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := ctrl.Project(func(pod *corev1.Pod) *podSummary {
		s := &podSummary{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, Labels: maps.Clone(pod.Labels)}}
		if len(pod.Spec.Containers) > 0 {
			s.Image = pod.Spec.Containers[0].Image
		}
		return s
	})
	if err != nil {
		panic(err)
	}
}

// TestProjectionAndMetadata runs a controller over a projection of Pods and
// reads Secrets as metadata only, on a real API server: the projection sees
// every Pod and its changes, its client refuses writes, and the metadata
// cache holds Secrets without their data, which the server never sent.
func TestProjectionAndMetadata(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	pod := func(name, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
	}
	for i := range 5 {
		_, err := clientset.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("web-%d", i), "registry.example/web:1"), metav1.CreateOptions{})
		must(t, err)
		_, err = clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i),
			Labels: map[string]string{"kind": "db"}}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
		must(t, err)
	}
	mgr := newManager(t, ns)
	var mu sync.Mutex
	images := map[string]string{}
	c, err := ctrl.NewController(mgr, "images", func(ctx context.Context, p *podSummary) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		images[p.Name] = p.Image
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	secretsRes := ctrl.APIResource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true}
	secrets, err := ctrl.NewCache[*metav1.PartialObjectMetadata](mgr, ctrl.CacheOptions{Resource: secretsRes})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)

	_, err = clientset.CoreV1().Pods(ns).Patch(ctx, "web-0", types.StrategicMergePatchType,
		[]byte(`{"spec":{"containers":[{"name":"app","image":"registry.example/web:2"}]}}`), metav1.PatchOptions{})
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(images) != 5 || images["web-0"] != "registry.example/web:2" {
			return fmt.Errorf("images seen: %v, want 5 Pods and web-0 at web:2", images)
		}
		return nil
	})
	if got := len(c.Cache().List(ns, nil)); got != 5 {
		t.Errorf("projection cache holds %d Pods, want 5", got)
	}

	summaries := newClient[*podSummary](t, mgr)
	if _, err := summaries.Create(ctx, &podSummary{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}); err == nil {
		t.Error("Create through a projection's client: got no error, want read-only")
	}
	got, err := summaries.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "web-1"})
	must(t, err)
	if got.Image != "registry.example/web:1" {
		t.Errorf("uncached Get of a projection: got image %q", got.Image)
	}

	var names []string
	for _, s := range secrets.List(ns, nil) {
		if s.Labels["kind"] == "db" {
			names = append(names, s.Name)
		}
		// Metadata carries the kind of the resource it is of, as the
		// fakes give it, not meta.k8s.io's PartialObjectMetadata.
		if s.APIVersion != "v1" || s.Kind != "Secret" {
			t.Errorf("secret %s: got apiVersion %q, kind %q, want v1 Secret", s.Name, s.APIVersion, s.Kind)
		}
	}
	slices.Sort(names)
	if want := []string{"s-0", "s-1", "s-2", "s-3", "s-4"}; !slices.Equal(names, want) {
		t.Errorf("metadata cache of Secrets: got %v, want %v", names, want)
	}
	meta, err := ctrl.NewClient[*metav1.PartialObjectMetadata](mgr, ctrl.ClientOptions{Resource: secretsRes})
	must(t, err)
	patched, err := meta.Patch(ctx, ctrl.Key{Namespace: ns, Name: "s-0"}, types.MergePatchType, []byte(`{"metadata":{"labels":{"seen":"yes"}}}`))
	must(t, err)
	if patched.Labels["seen"] != "yes" {
		t.Errorf("metadata patch: got labels %v", patched.Labels)
	}
	if _, err := meta.Create(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}); err == nil {
		t.Error("Create of metadata only: got no error")
	}
	waitIdle(t, mgr)
	if s, ok := secrets.Get(ctrl.Key{Namespace: ns, Name: "s-0"}); !ok || s.Labels["seen"] != "yes" {
		t.Errorf("metadata cache after the patch: got %v", s)
	}
}
