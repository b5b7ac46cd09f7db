// +groupName=example.ctrl.dev
// +versionName=v1

package widget

import (
	_ "embed"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// The Widget API. `make generate` runs controller-gen over this file:
// zz_generated.deepcopy.go gets the deep copies, and crd.yaml the
// CustomResourceDefinition, from the types and their markers (the
// +kubebuilder comments, and +groupName and +versionName above). Edit
// this file, never those two.

// Widget asks for a ConfigMap holding Spec.Message.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name=Phase,type=string,JSONPath=.status.phase
// +kubebuilder:printcolumn:name=ConfigMap,type=string,JSONPath=.status.configMap
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the user wants.
//
// +kubebuilder:object:generate=true
type Spec struct {
	// Message is what the ConfigMap holds.
	Message string `json:"message,omitempty"`
	// Replicas is copied into the ConfigMap too.
	// +kubebuilder:validation:Minimum=0
	Replicas int `json:"replicas,omitempty"`
	// Labels are put on the ConfigMap.
	Labels map[string]string `json:"labels,omitempty"`
}

// Status is what the controller did.
//
// +kubebuilder:object:generate=true
type Status struct {
	// Phase is Ready once the ConfigMap holds the message.
	Phase string `json:"phase,omitempty"`
	// ConfigMap names the Widget's ConfigMap.
	ConfigMap string `json:"configMap,omitempty"`
	// ObservedGeneration is the generation Phase is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CRD is the CustomResourceDefinition of Widget.
//
//go:embed crd.yaml
var CRD []byte

func init() {
	// The CRD says where the API server serves Widgets, their scope and
	// their status subresource: wiring a manager asks the server nothing.
	ctrl.MustRegister[*Widget](ctrl.APIResource{CRD: CRD})
}
