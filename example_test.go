package ctrl_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// A first controller: it labels every ConfigMap with the number of its keys.
func Example() {
	clientset := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"a": "1", "b": "2"}},
	)
	mgr, err := ctrl.NewManager(ctrl.Options{Clientset: clientset})
	if err != nil {
		panic(err)
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr)
	if err != nil {
		panic(err)
	}
	_, err = ctrl.NewController(mgr, "configmap-counter", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		want := fmt.Sprint(len(cm.Data))
		if cm.Labels["keys"] == want {
			return ctrl.Result{}, nil
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["keys"] = want
		_, err := configMaps.Update(ctx, cm)
		return ctrl.Result{}, err
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
	cm, err := configMaps.Get(ctx, ctrl.Key{Namespace: "default", Name: "settings"})
	if err != nil {
		panic(err)
	}
	fmt.Println("keys:", cm.Labels["keys"])
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// keys: 2
}
