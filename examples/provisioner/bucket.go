// Package provisioner is an example controller written twice with ctrl. A
// Bucket is provisioned through the phases Pending, Provisioning, Retrying
// (when its storage's name is taken) and Ready, and cleaned up through
// Deleting and Deleted before its finalizer goes. Its storage is a
// ConfigMap, standing in for a bucket in a cloud.
//
// machine.go runs it as a [ctrl.Machine]; plain.go writes the same
// controller, with the same phases, conditions, Events and finalizer, as a
// reconcile function of its own.
package provisioner

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl"
)

// CRD is the CustomResourceDefinition of Bucket.
//
//go:embed crd.yaml
var CRD []byte

// Bucket asks for storage of Spec.Size.
type Bucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the user wants.
type Spec struct {
	Size int `json:"size,omitempty"`
}

// Status is where the Bucket stands.
type Status struct {
	Phase              Phase              `json:"phase,omitempty"`
	Attempts           int                `json:"attempts,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (b *Bucket) DeepCopyObject() runtime.Object {
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(b.Status.Conditions)
	return &out
}

func init() {
	ctrl.MustRegister[*Bucket](ctrl.APIResource{Group: "example.ctrl.dev", Version: "v1", Resource: "buckets", Namespaced: true, Status: true})
}

// Phase is the state of a Bucket.
type Phase string

// The phases of a Bucket.
const (
	Pending      Phase = "Pending"
	Provisioning Phase = "Provisioning"
	Retrying     Phase = "Retrying"
	Ready        Phase = "Ready"
	Deleting     Phase = "Deleting"
	Deleted      Phase = "Deleted"
)

// Finalizer holds a deleted Bucket until its storage is gone.
const Finalizer = "example.ctrl.dev/bucket"

// Options configure the controller. The zero value is the defaults.
type Options struct {
	// RetryDelay is how long a Bucket whose storage could not be made waits
	// in Retrying before trying again. A new spec tries again at once.
	// Default: 10 seconds.
	RetryDelay time.Duration
}

// errNameTaken says the name of a Bucket's storage is taken.
var errNameTaken = errors.New("name taken")

// storage makes and removes the storage of Buckets: the work both
// controllers share.
type storage struct {
	configMaps *ctrl.Client[*corev1.ConfigMap]
}

func storageName(b *Bucket) string { return b.Name + "-bucket" }

// provision makes the storage of b, a ConfigMap it controls, of its size.
// It is idempotent.
func (s storage) provision(ctx context.Context, b *Bucket) error {
	want := map[string]string{"size": strconv.Itoa(b.Spec.Size)}
	cm, err := s.configMaps.Get(ctx, ctrl.Key{Namespace: b.Namespace, Name: storageName(b)})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: storageName(b)}, Data: want}
		if err := ctrl.SetControllerReference(b, cm); err != nil {
			return err
		}
		_, err = s.configMaps.Create(ctx, cm)
		return err
	case err != nil:
		return err
	case !metav1.IsControlledBy(cm, b):
		return fmt.Errorf("%w: ConfigMap %s belongs to someone else", errNameTaken, cm.Name)
	case !maps.Equal(cm.Data, want):
		cm.Data = want
		_, err = s.configMaps.Update(ctx, cm)
		return err
	}
	return nil
}

// deprovision removes the storage of b, if b controls it.
func (s storage) deprovision(ctx context.Context, b *Bucket) error {
	cm, err := s.configMaps.Get(ctx, ctrl.Key{Namespace: b.Namespace, Name: storageName(b)})
	if err != nil || !metav1.IsControlledBy(cm, b) {
		return ctrl.IgnoreNotFound(err)
	}
	return ctrl.IgnoreNotFound(s.configMaps.Delete(ctx, ctrl.KeyOf(cm), metav1.DeleteOptions{}))
}

// retryWait returns how long b, in Retrying, still has to wait: the Ready
// condition's lastTransitionTime is when it entered the phase.
func retryWait(b *Bucket, delay time.Duration) time.Duration {
	for _, c := range b.Status.Conditions {
		if c.Type == "Ready" {
			return time.Until(c.LastTransitionTime.Add(delay))
		}
	}
	return 0
}

func (o Options) retryDelay() time.Duration {
	if o.RetryDelay <= 0 {
		return 10 * time.Second
	}
	return o.RetryDelay
}
