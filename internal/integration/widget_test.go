package integration_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl"
)

// Widget is the suite's custom resource: a plain struct registered with
// ctrl.Register, with no generated clientset or scheme.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec `json:"spec"`
	// omitzero keeps an empty status out of Client.Apply, which would
	// otherwise claim it.
	Status WidgetStatus `json:"status,omitzero"`
}

// WidgetSpec is what the user asks for.
type WidgetSpec struct {
	Size int `json:"size"`
}

// WidgetStatus is what a controller observed.
type WidgetStatus struct {
	Phase        string `json:"phase,omitempty"`
	ObservedSize int    `json:"observedSize,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := ctrl.Register[*Widget](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets", Namespaced: true, Status: true})
	if err != nil {
		panic(err)
	}
}

// widgetCRD serves Widget, with a structural schema (the server prunes
// unknown fields) and the status subresource, so that spec and status are
// written apart and only spec changes bump metadata.generation.
const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
          status:
            type: object
            properties:
              phase:
                type: string
              observedSize:
                type: integer
`

// newWidget returns a Widget to create.
func newWidget(ns, name string, size int) *Widget {
	return &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: WidgetSpec{Size: size}}
}

// outsideWidgets returns a live client of Widgets from a manager that never
// starts: writes by someone else, which no running manager tracks.
func outsideWidgets(t *testing.T) *ctrl.Client[*Widget] {
	t.Helper()
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	must(t, err)
	return newClient[*Widget](t, mgr).Uncached()
}
