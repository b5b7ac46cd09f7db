package binding

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

func TestListUnmarshalProtobuf(t *testing.T) {
	in := &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next"},
		Items: []corev1.ConfigMap{
			{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Data: map[string]string{"k": "v"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Labels: map[string]string{"x": "y"}}},
		},
	}
	data, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var out List[*corev1.ConfigMap]
	if err := out.Unmarshal(data); err != nil {
		t.Fatal(err)
	}
	if out.ResourceVersion != "42" || out.Continue != "next" {
		t.Errorf("got list meta %+v, want resourceVersion 42 and continue next", out.ListMeta)
	}
	if len(out.Items) != 2 || !reflect.DeepEqual(*out.Items[0], in.Items[0]) || !reflect.DeepEqual(*out.Items[1], in.Items[1]) {
		t.Errorf("got items %+v, want %+v", out.Items, in.Items)
	}
	if err := out.Unmarshal(data[:len(data)-3]); err == nil {
		t.Error("got no error for a truncated list")
	}
	cp := out.DeepCopyObject().(*List[*corev1.ConfigMap])
	cp.Items[0].Data["k"] = "changed"
	if out.Items[0].Data["k"] != "v" {
		t.Error("DeepCopyObject shares items with the original")
	}
}

type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

type unregistered struct{ widget }

func TestLookup(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "widgets"}
	if err := Register(Info{Type: reflect.TypeFor[*widget](), GVR: gvr, Namespaced: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := Register(Info{Type: reflect.TypeFor[*widget](), GVR: gvr, Namespaced: true}, nil); err != nil {
		t.Errorf("registering the same type twice: %v", err)
	}
	tests := []struct {
		name    string
		info    Info
		wantErr string
	}{
		{"changed registration", Info{Type: reflect.TypeFor[*widget](), GVR: gvr}, "already registered"},
		{"built-in", Info{Type: reflect.TypeFor[*corev1.Pod](), GVR: gvr}, "built-in type"},
		{"not a pointer", Info{Type: reflect.TypeFor[widget](), GVR: gvr}, "pointer to a struct"},
		{"no resource", Info{Type: reflect.TypeFor[*unregistered](), GVR: schema.GroupVersionResource{Version: "v1"}}, "must be set"},
		{"upper case", Info{Type: reflect.TypeFor[*unregistered](), GVR: schema.GroupVersionResource{Version: "v1", Resource: "Widgets"}}, "lower-case"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Register(tt.info, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	info, err := Lookup[*widget]()
	if err != nil || info.Kind != "widget" || info.String() != "*binding.widget (widgets.example.dev/v1)" {
		t.Errorf("got %v, %v; want kind widget", info, err)
	}
	if _, err := Lookup[*unregistered](); err == nil || !strings.Contains(err.Error(), "*binding.unregistered is not a known resource: register it") {
		t.Errorf("got %v, want a not-known error naming the type", err)
	}
	if _, err := Lookup[*corev1.RangeAllocation](); err == nil || !strings.Contains(err.Error(), "*v1.RangeAllocation is not served") {
		t.Errorf("got %v, want a not-served error naming the type", err)
	}
}

func TestFakeBackend(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}})
	b, err := For[*corev1.ConfigMap](Clients{Clientset: cs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := b.Get(ctx, "ns", "a", metav1.GetOptions{})
	if err != nil || got.Name != "a" {
		t.Fatalf("Get: got %v, %v", got, err)
	}
	l, err := b.List(ctx, "ns", metav1.ListOptions{LabelSelector: "app=x"})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "a" {
		t.Fatalf("List: got %v, %v; want only a", l, err)
	}
	if _, err := For[*corev1.ConfigMap](Clients{}, nil); err == nil || !strings.Contains(err.Error(), "*v1.ConfigMap (configmaps): no client serves built-in types") {
		t.Errorf("got %v, want an error naming the type", err)
	}
}
