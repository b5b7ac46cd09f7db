package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// A controller over the ConfigMaps of every member of a fleet writes to
// each object's own cluster: the request's key names it, Client.InCluster binds the
// client to it.
func ExampleRequestFrom_fleet() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset()})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"east", "west"} {
		member := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
		if err := mgr.Engage(name, ctrl.Member{FakeClientset: member}); err != nil {
			panic(err)
		}
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	c, err := ctrl.NewController(mgr, "stamp-cluster", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		cluster := ctrl.RequestFrom(ctx).Key.Cluster
		if cm.Labels["cluster"] == cluster {
			return ctrl.Result{}, nil
		}
		stamped := cm.DeepCopy()
		stamped.Labels = map[string]string{"cluster": cluster}
		_, err := configMaps.InCluster(cluster).PatchFrom(ctx, cm, stamped)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Fleet: true}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	for _, name := range mgr.Clusters() {
		cm, _ := c.Cache().Get(ctrl.Key{Namespace: "default", Name: "settings", Cluster: name})
		fmt.Printf("%s: cluster=%s\n", name, cm.Labels["cluster"])
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// east: cluster=east
	// west: cluster=west
}

// Members from kubeconfig files: a file appears and its cluster joins the
// fleet; the file goes and so does the cluster.
func ExampleKubeconfigDir() {
	dir, err := os.MkdirTemp("", "fleet")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: east, cluster: {server: "https://east.example:6443"}}]
users: [{name: ctrl, user: {token: secret}}]
contexts: [{name: east, context: {cluster: east, user: ctrl}}]
current-context: east
`
	if err := os.WriteFile(filepath.Join(dir, "east.yaml"), []byte(kubeconfig), 0o600); err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), ClusterProvider: ctrl.KubeconfigDir(dir, ctrl.KubeconfigOptions{})})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	members := func(want ...string) []string {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) { // polling the fleet
			if got := mgr.Clusters(); slices.Equal(got, want) || time.Now().After(deadline) {
				return got
			}
		}
	}
	fmt.Println("members:", members("east"))
	if err := os.Remove(filepath.Join(dir, "east.yaml")); err != nil {
		panic(err)
	}
	fmt.Println("members:", members())
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// members: [east]
	// members: []
}

// Replicas that share a controller's objects: run the same program several
// times, each with its own identity (the pod name, say); each reconciles
// its share of the objects, and takes over the share of a replica that
// stops. Here, on the fakes, one replica serves the whole ring. The fakes
// cannot select by hash, so the ring runs in label mode: each object gets
// the shard label once, from the replica that serves it.
func ExampleSharding() {
	cs := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}},
	)
	mgr, err := ctrl.NewManager(ctrl.Options{
		FakeClientset: cs, // Config, in a real program
		Sharding:      ctrl.Sharding{Ring: "widgets", LeaseOptions: ctrl.LeaseOptions{Identity: "replica-1"}},
	})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var done []string
	_, err = ctrl.NewController(mgr, "stamp", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, cm.Name+" by "+ctrl.RequestFrom(ctx).Identity)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Second); err != nil {
		panic(err)
	}
	mu.Lock()
	slices.Sort(done)
	fmt.Println(done)
	mu.Unlock()
	cm, _ := cs.CoreV1().ConfigMaps("default").Get(ctx, "a", metav1.GetOptions{})
	fmt.Println("labeled:", cm.Labels["shard.ctrl.dev/widgets"] != "")
	cancel()
	if err := <-stopped; err != nil {
		panic(err)
	}
	// Output:
	// [a by replica-1 b by replica-1]
	// labeled: true
}

// IgnoreNotFound makes a delete of something already gone a success.
func ExampleIgnoreNotFound() {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "settings")
	fmt.Println(ctrl.IgnoreNotFound(gone))
	fmt.Println(ctrl.IgnoreNotFound(errors.New("connection refused")))
	// Output:
	// <nil>
	// connection refused
}

// Members from kubeconfig Secrets in the hub: a Secret with the label
// appears and its cluster joins the fleet, named after the Secret; the
// Secret goes and so does the cluster. A Secret without the label is not
// read.
func ExampleKubeconfigSecrets() {
	kubeconfig := []byte(`apiVersion: v1
kind: Config
clusters: [{name: east, cluster: {server: "https://east.example:6443"}}]
users: [{name: ctrl, user: {token: secret}}]
contexts: [{name: east, context: {cluster: east, user: ctrl}}]
current-context: east
`)
	secret := func(name string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, Labels: labels},
			Data: map[string][]byte{"kubeconfig": kubeconfig}}
	}
	member := map[string]string{"fleet.example.com/member": "true"}
	cs := fake.NewClientset(secret("east", member), secret("west", nil))
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: cs,
		ClusterProvider: ctrl.KubeconfigSecrets("fleet", labels.SelectorFromSet(member), ctrl.KubeconfigOptions{})})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	members := func(want ...string) []string {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) { // polling the fleet
			if got := mgr.Clusters(); slices.Equal(got, want) || time.Now().After(deadline) {
				return got
			}
		}
	}
	fmt.Println("members:", members("east"))
	if err := cs.CoreV1().Secrets("fleet").Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
		panic(err)
	}
	fmt.Println("members:", members())
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// members: [east]
	// members: []
}
