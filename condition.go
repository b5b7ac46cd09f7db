package ctrl

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets the condition of cond's type in *conditions to cond,
// with ObservedGeneration set to obj's metadata.generation. As
// meta.SetStatusCondition, LastTransitionTime changes only when the status
// does (to cond's, or now if that is zero). It reports whether *conditions
// changed, so a reconcile writes the status only then:
//
//	if ctrl.SetCondition(&w.Status.Conditions, w, metav1.Condition{
//		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Provisioned",
//	}) {
//		_, err = widgets.UpdateStatus(ctx, w)
//	}
func SetCondition(conditions *[]metav1.Condition, obj metav1.Object, cond metav1.Condition) bool {
	cond.ObservedGeneration = obj.GetGeneration()
	return meta.SetStatusCondition(conditions, cond)
}
