package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/podgen"
)

// fieldManager names the driver in the objects' managedFields.
const fieldManager = "bench-driver"

func createNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// createPods creates the Pods from..to-1 with plain creates, so the server
// records managedFields as it does for a ReplicaSet controller's.
func createPods(ctx context.Context, cs kubernetes.Interface, namespace string, from, to, writers int) error {
	return parallel(from, to, writers, func(i int) error {
		_, err := cs.CoreV1().Pods(namespace).Create(ctx, podgen.Pod(namespace, i), metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
}

// createConfigMaps creates n ConfigMaps of 1 KiB of data, as the
// throughput benchmark does.
func createConfigMaps(ctx context.Context, cs kubernetes.Interface, namespace string, n, writers int) error {
	payload := strings.Repeat("x", 1024)
	return parallel(0, n, writers, func(i int) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: podgen.Name("cm", i), Namespace: namespace,
				Labels:      map[string]string{"app.kubernetes.io/part-of": "ctrl-bench"},
				Annotations: map[string]string{podgen.RoundAnnotation: "0"}},
			Data: map[string]string{"payload": payload},
		}
		_, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
}

// patchRound sets the round annotation of the objects 0..n-1 with merge
// patches: one watch event each.
func patchRound(ctx context.Context, cs kubernetes.Interface, namespace, prefix string, n, round, writers int) error {
	patch := []byte(`{"metadata":{"annotations":{"` + podgen.RoundAnnotation + `":"` + strconv.Itoa(round) + `"}}}`)
	opts := metav1.PatchOptions{FieldManager: fieldManager}
	return parallel(0, n, writers, func(i int) error {
		var err error
		if prefix == "pod" {
			_, err = cs.CoreV1().Pods(namespace).Patch(ctx, podgen.Name(prefix, i), types.MergePatchType, patch, opts)
		} else {
			_, err = cs.CoreV1().ConfigMaps(namespace).Patch(ctx, podgen.Name(prefix, i), types.MergePatchType, patch, opts)
		}
		return err
	})
}

// parallel calls fn for from..to-1 on the given number of goroutines and
// returns the first error.
func parallel(from, to, workers int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		failed   atomic.Bool
	)
	next.Store(int64(from))
	for range workers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= to {
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
