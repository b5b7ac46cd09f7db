package scope

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

func TestNew(t *testing.T) {
	s := New(true, "def", []string{"b", "a", "b"}, labels.Everything(), nil)
	if !slices.Equal(s.Namespaces, []string{"a", "b"}) || s.Labels != nil || s.Selective() {
		t.Errorf("got %+v, want namespaces [a b] and no selector", s)
	}
	if s := New(true, "def", nil, nil, nil); !slices.Equal(s.Namespaces, []string{"def"}) {
		t.Errorf("default namespace: %v", s.Namespaces)
	}
	if s := New(true, "def", []string{"a", ""}, nil, nil); s.Namespaces != nil || !s.Holds("z") {
		t.Errorf(`"" among namespaces: %v, want all`, s.Namespaces)
	}
	if s := New(false, "def", []string{"a"}, nil, nil); s.Namespaces != nil {
		t.Errorf("cluster-scoped: %v, want none", s.Namespaces)
	}
	if got := New(true, "", []string{"a", "b"}, labels.SelectorFromSet(labels.Set{"x": "y"}), nil).String(); got != `in namespaces "a", "b" with labels "x=y"` {
		t.Errorf("String: %s", got)
	}
}

func TestSelects(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	for _, tc := range []struct {
		s    Scope
		want Selection
	}{
		{Scope{}, Selected},
		{Scope{Labels: labels.SelectorFromSet(labels.Set{"app": "db"})}, NotSelected},
		{Scope{Fields: fields.OneTermEqualSelector("metadata.name", "p")}, Selected},
		{Scope{Fields: fields.OneTermEqualSelector("metadata.name", "q")}, NotSelected},
		{Scope{Fields: fields.OneTermEqualSelector("spec.nodeName", "n1")}, Selected},
		{Scope{Fields: fields.OneTermEqualSelector("spec.nodeName", "n2")}, Unsure},
	} {
		if got := tc.s.Selects(pod); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.s, got, tc.want)
		}
	}
	if (Scope{Namespaces: []string{"a"}}).Holds("b") || !(Scope{Namespaces: []string{"a"}}).Holds("a") || (Scope{Namespaces: []string{"a"}}).Holds("") {
		t.Error("Holds: want a only")
	}
}
