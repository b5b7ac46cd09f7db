package provisioner

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl"
)

// SetupPlain wires the same Bucket controller into mgr, written without
// ctrl.Machine: the phases, conditions, Events and finalizer by hand.
func SetupPlain(mgr *ctrl.Manager, opts Options) error {
	buckets, err := ctrl.NewClient[*Bucket](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	events, err := ctrl.NewRecorder[*Bucket](mgr, "bucket")
	if err != nil {
		return err
	}
	p := &plain{buckets: buckets, storage: storage{configMaps}, events: events, opts: opts}
	c, err := ctrl.NewController(mgr, "bucket", p.reconcile, ctrl.ControllerOptions{Workers: 2})
	if err != nil {
		return err
	}
	_, err = ctrl.Owns[*corev1.ConfigMap](c)
	return err
}

type plain struct {
	buckets *ctrl.Client[*Bucket]
	storage
	events *ctrl.Recorder[*Bucket]
	opts   Options
}

func (p *plain) reconcile(ctx context.Context, b *Bucket) (ctrl.Result, error) {
	deleting := b.DeletionTimestamp != nil
	if !slices.Contains(b.Finalizers, Finalizer) {
		if deleting {
			return ctrl.Result{}, nil
		}
		// Before any move: provisioning makes what cleanup must remove.
		changed := b.DeepCopyObject().(*Bucket)
		changed.Finalizers = append(changed.Finalizers, Finalizer)
		var err error
		if b, err = p.buckets.PatchFrom(ctx, b, changed); err != nil {
			return ctrl.Result{}, err
		}
	}
	phase := b.Status.Phase
	switch {
	case deleting && phase == Deleted:
		changed := b.DeepCopyObject().(*Bucket)
		changed.Finalizers = slices.DeleteFunc(slices.Clone(b.Finalizers), func(f string) bool { return f == Finalizer })
		_, err := p.buckets.PatchFrom(ctx, b, changed)
		return ctrl.Result{}, ctrl.IgnoreNotFound(err)
	case deleting && phase != Deleting:
		return p.move(ctx, b, Deleting, "Deleting", "the object is being deleted", false)
	case deleting:
		if err := p.deprovision(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
		return p.move(ctx, b, Deleted, "Deprovisioned", "storage removed", false)
	case phase == "":
		return p.move(ctx, b, Pending, "Created", "new object", false)
	case b.Generation > b.Status.ObservedGeneration && (phase == Ready || phase == Retrying):
		return p.move(ctx, b, Provisioning, "SpecChanged", fmt.Sprintf("generation %d", b.Generation), false)
	case phase == Pending:
		return p.move(ctx, b, Provisioning, "Accepted", fmt.Sprintf("size %d", b.Spec.Size), false)
	case phase == Provisioning:
		b = b.DeepCopyObject().(*Bucket) // b is the cache's: change a copy
		b.Status.Attempts++
		err := p.provision(ctx, b)
		switch {
		case errors.Is(err, errNameTaken):
			return p.move(ctx, b, Retrying, "NameTaken", err.Error(), true)
		case err != nil:
			return ctrl.Result{}, err
		}
		return p.move(ctx, b, Ready, "Provisioned", "storage "+storageName(b), false)
	case phase == Retrying:
		if wait := retryWait(b, p.opts.retryDelay()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		return p.move(ctx, b, Provisioning, "Retry", "trying again", false)
	case b.Generation != b.Status.ObservedGeneration:
		b = b.DeepCopyObject().(*Bucket) // b is the cache's: change a copy
		b.Status.ObservedGeneration = b.Generation
		if c := meta.FindStatusCondition(b.Status.Conditions, "Ready"); c != nil {
			c.ObservedGeneration = b.Generation
		}
		_, err := p.buckets.UpdateStatus(ctx, b)
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// move writes b's move to phase to, with a Ready condition whose
// lastTransitionTime is now, and then reports it in an Event. The write
// carries b's resourceVersion: a conflict means b was stale, and the
// reconcile runs again on the newer Bucket.
func (p *plain) move(ctx context.Context, b *Bucket, to Phase, reason, message string, warning bool) (ctrl.Result, error) {
	from := b.Status.Phase
	b = b.DeepCopyObject().(*Bucket) // b is the cache's: change a copy
	status := metav1.ConditionFalse
	if to == Ready {
		status = metav1.ConditionTrue
	}
	b.Status.Phase = to
	b.Status.ObservedGeneration = b.Generation
	meta.RemoveStatusCondition(&b.Status.Conditions, "Ready")
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: "Ready", Status: status,
		ObservedGeneration: b.Generation, Reason: reason, Message: message})
	b, err := p.buckets.UpdateStatus(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	eventType := corev1.EventTypeNormal
	if warning {
		eventType = corev1.EventTypeWarning
	}
	if from == "" {
		p.events.Eventf(b, eventType, reason, "%s: %s", to, message)
	} else {
		p.events.Eventf(b, eventType, reason, "%s -> %s: %s", from, to, message)
	}
	return ctrl.Result{}, nil
}
