package provisioner_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/provisioner"
)

// TestBucketPlans runs both controllers through crashes after each write,
// stale views, unobserved states, 409 Conflicts and 410 Gone, comparing
// each end state with an unperturbed run's: a Bucket Ready at once,
// another Retrying while its storage's name is taken and Ready once it is
// free and the spec changes, and the first deleted through its finalizer.
// Compared: where each Bucket stands and its storage, not the count of
// attempts, which follows what the controller saw (a stale view can skip
// the taken state, or add a retry).
func TestBucketPlans(t *testing.T) {
	env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{provisioner.CRD}})
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			ctrltest.Explore(t, env, ctrltest.Exploration{
				Setup:    func(mgr *ctrl.Manager) error { return setup(mgr, provisioner.Options{RetryDelay: 2 * time.Second}) },
				Workload: bucketWorkload,
				Faults:   true,
				Fields: []string{"metadata.finalizers", "metadata.ownerReferences", "spec", "data",
					"status.phase", "status.observedGeneration", "status.conditions"},
			})
		})
	}
}

func bucketWorkload(w *ctrltest.Workload) error {
	buckets, err := ctrltest.ClientFor[*provisioner.Bucket](w)
	if err != nil {
		return err
	}
	configMaps, err := ctrltest.ClientFor[*corev1.ConfigMap](w)
	if err != nil {
		return err
	}
	ctx := w.Context()
	blocker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "taken-bucket"}}
	if _, err := configMaps.Create(ctx, blocker); err != nil {
		return err
	}
	for _, name := range []string{"free", "taken"} {
		b := &provisioner.Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name}, Spec: provisioner.Spec{Size: 1}}
		if _, err := buckets.Create(ctx, b); err != nil {
			return err
		}
	}
	if err := w.Settle(); err != nil {
		return err
	}
	if err := configMaps.Delete(ctx, ctrl.KeyOf(blocker)); err != nil {
		return err
	}
	if _, err := buckets.Patch(ctx, ctrl.Key{Namespace: w.Namespace, Name: "taken"}, types.MergePatchType, []byte(`{"spec":{"size":2}}`)); err != nil {
		return err
	}
	if err := w.Settle(); err != nil {
		return err
	}
	return buckets.Delete(ctx, ctrl.Key{Namespace: w.Namespace, Name: "free"})
}
