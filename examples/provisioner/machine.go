package provisioner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// Setup wires the Bucket controller into mgr, as a ctrl.Machine.
func Setup(mgr *ctrl.Manager, opts Options) error {
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	c, err := ctrl.NewMachine(mgr, "bucket", machine(storage{configMaps}, opts), ctrl.ControllerOptions{Workers: 2})
	if err != nil {
		return err
	}
	_, err = ctrl.Owns[*corev1.ConfigMap](c)
	return err
}

type next = ctrl.Next[Phase]

// machine declares the life of a Bucket whose storage s makes.
func machine(s storage, opts Options) ctrl.Machine[*Bucket, Phase] {
	return ctrl.Machine[*Bucket, Phase]{
		Initial: Pending,
		States: map[Phase]ctrl.State[*Bucket, Phase]{
			Pending: {To: []Phase{Provisioning}, Step: func(ctx context.Context, b *Bucket) (next, error) {
				return next{To: Provisioning, Reason: "Accepted", Message: fmt.Sprintf("size %d", b.Spec.Size)}, nil
			}},
			Provisioning: {To: []Phase{Ready, Retrying}, Step: func(ctx context.Context, b *Bucket) (next, error) {
				b.Status.Attempts++
				err := s.provision(ctx, b)
				switch {
				case errors.Is(err, errNameTaken):
					return next{To: Retrying, Reason: "NameTaken", Message: err.Error(), Warning: true}, nil
				case err != nil:
					return next{}, err
				}
				return next{To: Ready, Reason: "Provisioned", Message: "storage " + storageName(b)}, nil
			}},
			Retrying: {To: []Phase{Provisioning}, SpecChanged: Provisioning, Step: func(ctx context.Context, b *Bucket) (next, error) {
				if wait := retryWait(b, opts.retryDelay()); wait > 0 {
					return next{RequeueAfter: wait}, nil
				}
				return next{To: Provisioning, Reason: "Retry", Message: "trying again"}, nil
			}},
			Ready: {Ready: true, SpecChanged: Provisioning},
			Deleting: {To: []Phase{Deleted}, Step: func(ctx context.Context, b *Bucket) (next, error) {
				if err := s.deprovision(ctx, b); err != nil {
					return next{}, err
				}
				return next{To: Deleted, Reason: "Deprovisioned", Message: "storage removed"}, nil
			}},
			Deleted: {},
		},
		Phase:              func(b *Bucket) *Phase { return &b.Status.Phase },
		Conditions:         func(b *Bucket) *[]metav1.Condition { return &b.Status.Conditions },
		ObservedGeneration: func(b *Bucket) *int64 { return &b.Status.ObservedGeneration },
		Finalizer:          Finalizer,
		Deleting:           Deleting,
	}
}
