package docs_test

// The code the README and the guides show that is not a file of its own:
// each function holds a block verbatim (TestCode checks it), with what it
// needs from around it as parameters, so that the build compiles it.

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// README.md, at the top.
func front(ctx context.Context, restConfig *rest.Config) {
	mgr, _ := ctrl.NewManager(ctrl.Options{Config: restConfig})
	c, _ := ctrl.NewController(mgr, "configmap-hasher",
		func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			// cm is the latest cached ConfigMap, the cache's own: read it,
			// and change a copy (cm.DeepCopy()) to write it
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{Workers: 4})
	ctrl.Owns[*corev1.Secret](c) // reconcile the owner of a Secret when it changes
	mgr.Start(ctx)               // blocks until ctx is done
}

// docs/many-clusters.md.
func fleet(hub *rest.Config, configMaps *ctrl.Client[*corev1.ConfigMap], labeled func(*corev1.ConfigMap) *corev1.ConfigMap) {
	mgr, err := ctrl.NewManager(ctrl.Options{Config: hub, ClusterProvider: ctrl.KubeconfigDir("/etc/fleet", ctrl.KubeconfigOptions{})})
	c, err := ctrl.NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		member := ctrl.RequestFrom(ctx).Key.Cluster // the cluster of cm
		_, err := configMaps.InCluster(member).PatchFrom(ctx, cm, labeled(cm))
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Fleet: true}})
	_, _ = c, err
}

// docs/scaling-out.md.
func sharded(cfg *rest.Config) {
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg,
		Sharding: ctrl.Sharding{Ring: "widgets", LeaseOptions: ctrl.LeaseOptions{Identity: os.Getenv("POD_NAME"), LeaseDuration: 10 * time.Second}}})
	_, _ = mgr, err
}

// docs/wiring.md.
func optional(mgr *ctrl.Manager, c *ctrl.Controller[*corev1.Secret], certificateOwner func(*Certificate) []ctrl.Key) {
	certs, err := ctrl.NewCache[*Certificate](mgr, ctrl.CacheOptions{Optional: true})
	err = ctrl.Watches(c, certs, certificateOwner)
	// in the reconcile: if !certs.Served() { use a self-signed Secret instead }
	_ = err
}

// docs/webhooks.md.
func webhooks(mgr *ctrl.Manager) {
	err := ctrl.Validate(mgr, ctrl.Validator[*Widget]{
		Create: func(ctx context.Context, w *Widget) error {
			if w.Spec.Replicas > 10 { // 422 Invalid, with the field kubectl shows
				return field.Invalid(field.NewPath("spec", "replicas"), w.Spec.Replicas, "must be at most 10")
			}
			return nil
		},
		Update: func(ctx context.Context, old, w *Widget) error { return nil },
	})
	err = ctrl.Mutate(mgr, func(ctx context.Context, w *Widget) error {
		if w.Spec.Message == "" {
			w.Spec.Message = "hello" // ctrl answers with a JSON patch of the change
			ctrl.AdmissionWarning(ctx, "spec.message defaulted to hello")
		}
		return nil
	})
	// Two versions of one resource, both registered with ctrl.Register.
	err = ctrl.Convert(mgr,
		func(ctx context.Context, src *WidgetV1alpha1, dst *Widget) error {
			dst.Spec.Replicas = src.Spec.Size
			return nil
		},
		func(ctx context.Context, src *Widget, dst *WidgetV1alpha1) error {
			dst.Spec.Size = src.Spec.Replicas
			return nil
		})
	_ = err
}

// Certificate stands for cert-manager's, Widget and WidgetV1alpha1 for two
// versions of a custom resource.
type (
	Certificate struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
	}
	Widget struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Message  string `json:"message,omitempty"`
			Replicas int    `json:"replicas,omitempty"`
		} `json:"spec"`
	}
	WidgetV1alpha1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Size int `json:"size,omitempty"`
		} `json:"spec"`
	}
)

func (c *Certificate) DeepCopyObject() runtime.Object    { out := *c; return &out }
func (w *Widget) DeepCopyObject() runtime.Object         { out := *w; return &out }
func (w *WidgetV1alpha1) DeepCopyObject() runtime.Object { out := *w; return &out }
