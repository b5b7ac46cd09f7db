package integration_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// BenchmarkCreate200 creates 200 ConfigMaps through a manager's client,
// with the client-side rate limit of controller-runtime (20/s, burst 30)
// and with ctrl's default. It measures the limit, not the server: run it
// with -benchtime=1x.
func BenchmarkCreate200(b *testing.B) {
	for _, tc := range []struct {
		name  string
		qps   float32
		burst int
	}{{"limit-20qps", 20, 30}, {"default", 0, 0}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns, err := clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "qps-"}}, metav1.CreateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				cfg := env.Config()
				cfg.QPS, cfg.Burst = tc.qps, tc.burst
				mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns.Name})
				if err != nil {
					b.Fatal(err)
				}
				cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := range 200 {
					if _, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprint(i)}}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
