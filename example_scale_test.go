package ctrl_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// PodPhase is what a controller of Pods reads of them: a projection, a few
// dozen bytes per Pod instead of its whole spec and status.
type PodPhase struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Phase corev1.PodPhase
	Node  string
}

// DeepCopyObject implements runtime.Object.
func (p *PodPhase) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := ctrl.Project(func(pod *corev1.Pod) *PodPhase {
		return &PodPhase{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
				ResourceVersion: pod.ResourceVersion, Labels: maps.Clone(pod.Labels)},
			Phase: pod.Status.Phase,
			Node:  pod.Spec.NodeName,
		}
	})
	if err != nil {
		panic(err)
	}
}

// A controller over a projection: the cache holds a PodPhase per Pod, and
// reconcile cannot read a field the projection does not keep.
func ExampleProject() {
	pod := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(
		pod("web-1", "node-a", corev1.PodRunning), pod("web-2", "node-b", corev1.PodPending))})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var seen []string
	_, err = ctrl.NewController(mgr, "pod-phases", func(ctx context.Context, p *PodPhase) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s on %s: %s", p.Name, p.Node, p.Phase))
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	slices.Sort(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// web-1 on node-a: Running
	// web-2 on node-b: Pending
}

// A cache of metadata only: for Secrets, whose data the controller must
// not hold, the server sends metadata alone.
func ExampleNewCache_metadataOnly() {
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"team": "blue"}},
			Data: map[string][]byte{"password": []byte("hunter2")}}
	}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(secret("db"), secret("api"))})
	if err != nil {
		panic(err)
	}
	secrets, err := ctrl.NewCache[*metav1.PartialObjectMetadata](mgr, ctrl.CacheOptions{
		Resource: ctrl.APIResource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := secrets.WaitForSync(ctx); err != nil {
		panic(err)
	}
	var names []string
	for _, s := range secrets.List("default", nil) {
		names = append(names, s.Name+" team="+s.Labels["team"])
	}
	slices.Sort(names)
	fmt.Println(names)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// [api team=blue db team=blue]
}
