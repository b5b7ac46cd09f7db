package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

// fieldManager names the driver in the objects' managedFields.
const fieldManager = "bench-driver"

// dataBytes is the size of each ConfigMap's data, as in the throughput
// benchmark.
const dataBytes = 1024

// createObjects creates the namespace and N ConfigMaps at sequence number 0.
func createObjects(ctx context.Context, cs kubernetes.Interface, c config) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace: %w", err)
	}
	payload := strings.Repeat("x", dataBytes)
	var next atomic.Int64
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			for i := int(next.Add(1)) - 1; i < c.n; i = int(next.Add(1)) - 1 {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:        shapes.ObjectName(i),
						Namespace:   c.namespace,
						Annotations: map[string]string{shapes.SeqAnnotation: "0"},
					},
					Data: map[string]string{"payload": payload},
				}
				_, err := cs.CoreV1().ConfigMaps(c.namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating %s: %w", cm.Name, err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range cap(errs) {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// write is one patch the driver made: to object obj, setting its sequence
// number to seq; sent and returned are wall clock Unix nanoseconds.
type write struct {
	obj            int
	seq            int64
	sent, returned int64
}

// writeAll patches every object c.rounds times, in order, at c.rate patches
// a second: write k (from 1) sets object (k-1) mod N to base+k. The pace is
// a fixed schedule, kept by c.writers goroutines, so a slow response delays
// no other write.
func writeAll(ctx context.Context, cs kubernetes.Interface, c config, base int64) ([]write, error) {
	writes := make([]write, c.n*c.rounds)
	interval := time.Duration(float64(time.Second) / c.rate)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range c.writers {
		wg.Go(func() {
			for failed.Load() == nil {
				k := int(next.Add(1)) - 1
				if k >= len(writes) {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(k) * interval)))
				w := &writes[k]
				w.obj, w.seq = k%c.n, base+int64(k)+1
				patch := []byte(`{"metadata":{"annotations":{"` + shapes.SeqAnnotation + `":"` + strconv.FormatInt(w.seq, 10) + `"}}}`)
				w.sent = time.Now().UnixNano()
				_, err := cs.CoreV1().ConfigMaps(c.namespace).Patch(ctx, shapes.ObjectName(w.obj), types.MergePatchType, patch,
					metav1.PatchOptions{FieldManager: fieldManager})
				w.returned = time.Now().UnixNano()
				if err != nil {
					err = fmt.Errorf("patching %s: %w", shapes.ObjectName(w.obj), err)
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return nil, *err
	}
	return writes, nil
}
