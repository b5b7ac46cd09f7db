// Package widget is an example controller built with ctrl: a Widget custom
// resource owns a ConfigMap that carries its message, reports progress in
// its status with conditions, and cleans up with a finalizer.
package widget

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/go-logr/logr"

	"github.com/typedctrl/ctrl"
)

// Finalizer is the finalizer the controller puts on Widgets.
const Finalizer = "example.ctrl.dev/cleanup"

// Setup wires the Widget controller into mgr.
func Setup(mgr *ctrl.Manager) error {
	widgets, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return err
	}
	events, err := ctrl.NewRecorder[*Widget](mgr, "widget-controller")
	if err != nil {
		return err
	}
	r := &reconciler{widgets: widgets, configMaps: configMaps, events: events}
	c, err := ctrl.NewController(mgr, "widget", r.reconcile, ctrl.ControllerOptions{Workers: 2})
	if err != nil {
		return err
	}
	if err := c.FilterUpdates(ctrl.GenerationChanged); err != nil {
		return err
	}
	if err := c.OnFinalize(Finalizer, r.finalize); err != nil {
		return err
	}
	if _, err := ctrl.Owns[*corev1.ConfigMap](c); err != nil {
		return err
	}
	// What the reconcile writes, which the wiring cannot see: with what the
	// wiring needs, mgr.RBACRules returns them, and ctrltest.Manifests
	// writes them into the roles.
	mgr.AddRBACRules(
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"example.ctrl.dev"}, Resources: []string{"widgets/status"}, Verbs: []string{"update"}},
	)
	return nil
}

// SetupWebhooks registers the Widget's admission webhooks with mgr: a
// validator that keeps spec.replicas between 0 and 10, and a defaulter that
// gives a Widget without a message the message "hello". Serve them with
// Options.WebhookAddress and tell the API server about them with
// mgr.WebhookConfigurations.
func SetupWebhooks(mgr *ctrl.Manager) error {
	validate := func(w *Widget) error {
		if r := w.Spec.Replicas; r < 0 || r > 10 {
			return field.Invalid(field.NewPath("spec", "replicas"), r, "must be between 0 and 10")
		}
		return nil
	}
	err := ctrl.Validate(mgr, ctrl.Validator[*Widget]{
		Create: func(_ context.Context, w *Widget) error { return validate(w) },
		Update: func(_ context.Context, _, w *Widget) error { return validate(w) },
	})
	if err != nil {
		return err
	}
	return ctrl.Mutate(mgr, func(ctx context.Context, w *Widget) error {
		if w.Spec.Message == "" {
			w.Spec.Message = "hello"
			logr.FromContextOrDiscard(ctx).Info("defaulted the message", "widget", w.Name, "message", w.Spec.Message)
		}
		return nil
	})
}

type reconciler struct {
	widgets    *ctrl.Client[*Widget]
	configMaps *ctrl.Client[*corev1.ConfigMap]
	events     *ctrl.Recorder[*Widget]
}

func configMapName(w *Widget) string { return w.Name + "-message" }

func (r *reconciler) reconcile(ctx context.Context, w *Widget) (ctrl.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	key := ctrl.Key{Namespace: w.Namespace, Name: configMapName(w)}
	want := map[string]string{"message": w.Spec.Message, "replicas": fmt.Sprint(w.Spec.Replicas)}

	cm, err := r.configMaps.Get(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: w.Spec.Labels}, Data: want}
		if err := ctrl.SetControllerReference(w, cm); err != nil {
			return ctrl.Result{}, ctrl.Terminal(err)
		}
		if _, err := r.configMaps.Create(ctx, cm); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("created ConfigMap", "configMap", key.Name)
		r.events.Eventf(w, corev1.EventTypeNormal, "Created", "created ConfigMap %s", key.Name)
	case err != nil:
		return ctrl.Result{}, err
	case !maps.Equal(cm.Data, want) || !maps.Equal(cm.Labels, w.Spec.Labels):
		cm.Data, cm.Labels = want, w.Spec.Labels
		if _, err := r.configMaps.Update(ctx, cm); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("updated ConfigMap", "configMap", key.Name)
	}

	if w.Status.ObservedGeneration == w.Generation && w.Status.Phase == "Ready" {
		return ctrl.Result{}, nil
	}
	w = w.DeepCopy() // w is the cache's: change a copy
	w.Status.Phase = "Ready"
	w.Status.ConfigMap = key.Name
	w.Status.ObservedGeneration = w.Generation
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
		Type:               "Ready",
		Status:             metav1.ConditionTrue,
		ObservedGeneration: w.Generation,
		Reason:             "ConfigMapUpToDate",
		Message:            fmt.Sprintf("ConfigMap %s holds the message", key.Name),
	})
	if _, err := r.widgets.UpdateStatus(ctx, w); err != nil {
		return ctrl.Result{}, err // a conflict: reconciled again with the newer Widget
	}
	log.Info("widget ready", "generation", w.Generation)
	return ctrl.Result{}, nil
}

// finalize deletes the ConfigMap. The garbage collector would too, via the
// owner reference, but only where kube-controller-manager runs.
func (r *reconciler) finalize(ctx context.Context, w *Widget) error {
	err := r.configMaps.Delete(ctx, ctrl.Key{Namespace: w.Namespace, Name: configMapName(w)}, metav1.DeleteOptions{})
	if err := ctrl.IgnoreNotFound(err); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("cleaned up", "configMap", configMapName(w))
	return nil
}
