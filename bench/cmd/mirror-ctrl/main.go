// Command mirror-ctrl is the fault benchmark's mirror controller written with
// ctrl. See package mirror for what it does.
package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/bench/internal/mirror"
)

func main() {
	p := mirror.Begin("mirror-ctrl")
	// Verbosity 5 shows the reflector's lines, which ctrl logs one level
	// below client-go's: the same detail as -v=4 gives the others.
	mgr, err := ctrl.NewManager(ctrl.Options{Config: p.Config, Namespace: p.Namespace, Logger: p.Logger(5), FieldManager: mirror.FieldManager})
	if err != nil {
		p.Fatal(err)
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		p.Fatal(err)
	}
	c, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, src *corev1.ConfigMap) (ctrl.Result, error) {
		dst := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: mirror.Name(src.Name)}, Data: src.Data}
		_, err := cms.Apply(ctx, dst, ctrl.ApplyParams{Force: true})
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: mirror.Workers, Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{mirror.SourceLabel: mirror.SourceValue})}})
	if err != nil {
		p.Fatal(err)
	}
	err = c.OnDelete(func(ctx context.Context, src *corev1.ConfigMap) error {
		return ctrl.IgnoreNotFound(cms.Delete(ctx, ctrl.Key{Namespace: src.Namespace, Name: mirror.Name(src.Name)}, metav1.DeleteOptions{}))
	})
	if err != nil {
		p.Fatal(err)
	}
	if err := mgr.Start(p.Ctx); err != nil {
		p.Fatal(err)
	}
}
