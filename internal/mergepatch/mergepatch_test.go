package mergepatch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPatches(t *testing.T) {
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "7", Labels: map[string]string{"app": "a"}}}
	obj := old.DeepCopy()
	if p, err := Between(old, obj); p != nil || err != nil {
		t.Fatalf("Between unchanged = %s, %v; want nil", p, err)
	}
	obj.Labels["team"] = "x"
	obj.Status.Phase = corev1.PodRunning
	p, err := Between(old, obj)
	if want := `{"metadata":{"labels":{"team":"x"},"resourceVersion":"7"},"status":{"phase":"Running"}}`; err != nil || string(p) != want {
		t.Errorf("Between = %s, %v; want %s", p, err, want)
	}
	p, err = Status(old, obj)
	if want := `{"metadata":{"resourceVersion":"7"},"status":{"phase":"Running"}}`; err != nil || string(p) != want {
		t.Errorf("Status = %s, %v; want %s", p, err, want)
	}
	out := &corev1.Pod{}
	changed, err := ApplyStatus(old, obj, out)
	if err != nil || !changed || out.Status.Phase != corev1.PodRunning || out.Labels["team"] != "" {
		t.Errorf("ApplyStatus = %v, %v, %+v; want the status applied, not the labels", changed, err, out)
	}
}
