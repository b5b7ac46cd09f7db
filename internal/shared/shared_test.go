package shared

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func pod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "a"}, CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "img:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
		}}},
	}
}

func TestDiff(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*corev1.Pod)
		want   string
	}{
		{"nothing", func(*corev1.Pod) {}, ""},
		{"a label set", func(p *corev1.Pod) { p.Labels["team"] = "x" }, `metadata.labels["team"]`},
		{"a label changed", func(p *corev1.Pod) { p.Labels["app"] = "b" }, `metadata.labels["app"]`},
		{"labels replaced by equal ones", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "a"} }, ""},
		{"annotations from nil to empty", func(p *corev1.Pod) { p.Annotations = map[string]string{} }, "metadata.annotations"},
		{"an image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "img:2" }, "spec.containers[0].image"},
		{"a container added", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{}) }, "spec.containers"},
		{"the kind", func(p *corev1.Pod) { p.Kind = "" }, "kind"},
		{"a request", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
		}, `spec.containers[0].resources.requests["cpu"]`},
		{"a quantity's cached string", func(p *corev1.Pod) {
			q := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
			_ = q.String()
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = q
		}, ""},
		{"a status", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, "status.phase"},
		{"a deletion timestamp", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }, "metadata.deletionTimestamp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := pod()
			b := a.DeepCopy()
			tt.change(b)
			if got := Diff(a, b); got != tt.want {
				t.Errorf("Diff = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSampler(t *testing.T) {
	s := Sampler{First: 3, Every: 10}
	var checked []int
	for i := 1; i <= 40; i++ {
		if s.Next() {
			checked = append(checked, i)
		}
	}
	want := []int{1, 2, 3, 10, 20, 30, 40}
	if len(checked) != len(want) {
		t.Fatalf("checked %v, want %v", checked, want)
	}
	for i := range want {
		if checked[i] != want[i] {
			t.Fatalf("checked %v, want %v", checked, want)
		}
	}
	all := Sampler{Every: 1}
	for range 5 {
		if !all.Next() {
			t.Fatal("Every 1 skipped a use")
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "a"}}, Data: map[string]string{"data": string(make([]byte, 1024))}}
	p := pod()
	b.Run("ConfigMap", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Diff(cm, cm.DeepCopy()) != "" {
				b.Fatal("differ")
			}
		}
	})
	b.Run("Pod", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Diff(p, p.DeepCopy()) != "" {
				b.Fatal("differ")
			}
		}
	})
}

func TestDiffUnstructured(t *testing.T) {
	a := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "labels": map[string]any{"app": "a"}},
		"spec":     map[string]any{"size": int64(3)},
	}}
	for _, tt := range []struct {
		name   string
		change func(*unstructured.Unstructured)
		want   string
	}{
		{"nothing", func(*unstructured.Unstructured) {}, ""},
		{"a nested field", func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["size"] = int64(4) }, "spec.size"},
		{"a status added", func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{} }, "status"},
		{"a label", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"app": "b"}) }, "metadata.labels.app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := a.DeepCopy()
			tt.change(b)
			if got := Diff(a, b); got != tt.want {
				t.Errorf("Diff = %q, want %q", got, tt.want)
			}
		})
	}
}
