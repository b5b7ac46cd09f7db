package ctrl_test

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// A hub object mirrored into every member cluster of a fleet: the
// controller reconciles the hub's ConfigMaps labeled mirror=yes and writes
// a copy into each member; a fleet cache of the copies maps a change in
// any member back to the hub object, and a member that joins later gets
// its copy as soon as it has been listed.
func ExampleManager_Engage() {
	hub := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", Labels: map[string]string{"mirror": "yes"}},
		Data:       map[string]string{"color": "blue"},
	})
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: hub})
	if err != nil {
		panic(err)
	}
	members := map[string]*fake.Clientset{"east": fake.NewClientset(), "west": fake.NewClientset()}
	for _, name := range []string{"east", "west"} {
		if err := mgr.Engage(name, ctrl.Member{FakeClientset: members[name]}); err != nil {
			panic(err)
		}
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}
	mirror := labels.SelectorFromSet(labels.Set{"mirror": "yes"})
	c, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, src *corev1.ConfigMap) (ctrl.Result, error) {
		for _, member := range mgr.Clusters() {
			_, _, err := configMaps.InCluster(member).CreateOrPatch(ctx, ctrl.KeyOf(src), func(cm *corev1.ConfigMap) error {
				cm.Labels = map[string]string{"mirror": "yes"}
				cm.Data = maps.Clone(src.Data)
				return nil
			})
			if err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: mirror}})
	if err != nil {
		panic(err)
	}
	copies, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Fleet: true, LabelSelector: mirror})
	if err != nil {
		panic(err)
	}
	// A copy in any member maps to the hub object of the same name.
	err = ctrl.Watches(c, copies, func(cm *corev1.ConfigMap) []ctrl.Key { return []ctrl.Key{ctrl.KeyOf(cm)} })
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	members["north"] = fake.NewClientset()
	if err := mgr.Engage("north", ctrl.Member{FakeClientset: members["north"]}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	for _, name := range mgr.Clusters() {
		cm, ok := copies.Get(ctrl.Key{Namespace: "default", Name: "settings", Cluster: name})
		if !ok {
			panic("no copy in " + name)
		}
		fmt.Printf("%s: color=%s\n", name, cm.Data["color"])
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// east: color=blue
	// north: color=blue
	// west: color=blue
}
