package ctrl_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedctrl/ctrl"
)

// TestMustRegister checks that MustRegister registers like Register, and
// panics with Register's error.
func TestMustRegister(t *testing.T) {
	same := ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	ctrl.MustRegister[*Widget](same) // as the tests' init registered it: nothing to do
	for name, register := range map[string]func(){
		"built-in": func() { ctrl.MustRegister[*corev1.Pod](ctrl.APIResource{Version: "v1", Resource: "pods"}) },
		"conflicting": func() {
			ctrl.MustRegister[*Widget](ctrl.APIResource{Group: "other.com", Version: "v1", Resource: "widgets"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.HasPrefix(fmt.Sprint(r), "ctrl: register *ctrl_test.") && !strings.HasPrefix(fmt.Sprint(r), "ctrl: register *v1.Pod") {
					t.Errorf("got panic %v, want Register's error", r)
				}
			}()
			register()
		})
	}
}
