package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/harness"
)

// fieldManager names the driver in the objects' managedFields.
const fieldManager = "bench-driver"

// createObjects creates the namespace and N ConfigMaps at round 0 with
// ordinary creates, so the server records managedFields as it does for any
// client.
func createObjects(ctx context.Context, cs kubernetes.Interface, cfg config) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace: %w", err)
	}
	payload := strings.Repeat("x", cfg.dataBytes)
	return parallel(cfg.n, cfg.writers, func(i int) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:        harness.ObjectName(i),
				Namespace:   cfg.namespace,
				Labels:      map[string]string{"app.kubernetes.io/part-of": "ctrl-bench"},
				Annotations: map[string]string{harness.RoundAnnotation: "0"},
			},
			Data: map[string]string{"payload": payload},
		}
		_, err := cs.CoreV1().ConfigMaps(cfg.namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
}

// patchAll sets the round annotation of every object to round with merge
// patches.
func patchAll(ctx context.Context, cs kubernetes.Interface, cfg config, round int) error {
	patch := []byte(`{"metadata":{"annotations":{"` + harness.RoundAnnotation + `":"` + strconv.Itoa(round) + `"}}}`)
	var pace *rate.Limiter
	if cfg.patchRate > 0 {
		pace = rate.NewLimiter(rate.Limit(cfg.patchRate), 1)
	}
	return parallel(cfg.n, cfg.writers, func(i int) error {
		if pace != nil {
			if err := pace.Wait(ctx); err != nil {
				return err
			}
		}
		_, err := cs.CoreV1().ConfigMaps(cfg.namespace).Patch(ctx, harness.ObjectName(i), types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: fieldManager})
		return err
	})
}

// parallel calls fn for 0..n-1 on the given number of goroutines and
// returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		failed   atomic.Bool
	)
	for range workers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("object %d: %w", i, err) })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
