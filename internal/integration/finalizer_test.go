package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

const finalizer = "example.com/cleanup"

// hooks records what a Widget controller's reconcile, finalize and OnDelete
// functions were called with.
type hooks struct {
	mu sync.Mutex
	// failFinalize is how many calls of finalize fail before one succeeds.
	failFinalize int
	reconciled   []*Widget
	finalized    []*Widget
	deleted      []*Widget
}

func (h *hooks) reconcile(_ context.Context, w *Widget) (ctrl.Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reconciled = append(h.reconciled, w)
	return ctrl.Result{}, nil
}

func (h *hooks) finalize(_ context.Context, w *Widget) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finalized = append(h.finalized, w)
	if len(h.finalized) <= h.failFinalize {
		return errors.New("cleanup failed")
	}
	return nil
}

func (h *hooks) onDelete(_ context.Context, w *Widget) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deleted = append(h.deleted, w)
	return nil
}

// calls returns copies of the recorded calls.
func (h *hooks) calls() (reconciled, finalized, deleted []*Widget) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reconciled), slices.Clone(h.finalized), slices.Clone(h.deleted)
}

// TestFinalizer follows a Widget from its creation, when the controller adds
// its finalizer, through its deletion, when finalize runs (and is retried
// when it fails), the finalizer is removed, and the server lets the Widget
// go; OnDelete then sees it gone.
func TestFinalizer(t *testing.T) {
	for _, tt := range []struct {
		name     string
		failures int
	}{{"finalize succeeds", 0}, {"finalize fails twice", 2}} {
		t.Run(tt.name, func(t *testing.T) {
			failures := tt.failures
			ns := newNamespace(t)
			mgr := newManager(t, ns)
			widgets := newClient[*Widget](t, mgr)
			h := &hooks{failFinalize: failures}
			c, err := ctrl.NewController(mgr, "cleaner", h.reconcile, ctrl.ControllerOptions{})
			must(t, err)
			must(t, c.OnFinalize(finalizer, h.finalize))
			must(t, c.OnDelete(h.onDelete))
			ctx := start(t, mgr)

			created, err := widgets.Create(ctx, newWidget(ns, "w", 1))
			must(t, err)
			key := ctrl.KeyOf(created)
			waitIdle(t, mgr)
			got, err := widgets.Uncached().Get(ctx, key)
			must(t, err)
			if !slices.Equal(got.Finalizers, []string{finalizer}) {
				t.Errorf("finalizers on the server: got %v, want [%s]", got.Finalizers, finalizer)
			}
			before, _, _ := h.calls()
			if len(before) == 0 || slices.ContainsFunc(before, func(w *Widget) bool { return !slices.Equal(w.Finalizers, []string{finalizer}) }) {
				t.Errorf("got reconciles of Widgets with finalizers %v, want at least one, each with the finalizer in place", finalizersOf(before))
			}

			must(t, widgets.Delete(ctx, key, metav1.DeleteOptions{}))
			// Not WaitIdle: see TestWaitIdleAfterFinalizerRemoval.
			eventually(t, 30*time.Second, func() error {
				if _, err := widgets.Uncached().Get(ctx, key); !apierrors.IsNotFound(err) {
					return fmt.Errorf("Get after the deletion: got %v, want not found", err)
				}
				if _, _, deleted := h.calls(); len(deleted) == 0 {
					return errors.New("OnDelete: got no call, want one")
				}
				return nil
			})
			reconciled, finalized, deleted := h.calls()
			if len(reconciled) != len(before) {
				t.Errorf("got %d reconciles after the deletion, want none: finalize, not reconcile, handles a deletion", len(reconciled)-len(before))
			}
			if len(finalized) != failures+1 {
				t.Errorf("got %d finalize calls, want %d", len(finalized), failures+1)
			}
			for i, w := range finalized {
				if w.DeletionTimestamp == nil || !slices.Contains(w.Finalizers, finalizer) || w.UID != created.UID {
					t.Errorf("finalize call %d: got deletionTimestamp %v, finalizers %v, uid %s; want the Widget being deleted, with the finalizer",
						i+1, w.DeletionTimestamp, w.Finalizers, w.UID)
				}
			}
			if len(deleted) != 1 || deleted[0].UID != created.UID {
				t.Errorf("OnDelete: got %d calls, want 1 with uid %s", len(deleted), created.UID)
			}
		})
	}
}

// TestFinalizerWithGenerationFilter combines a finalizer with the most
// common update filter. FilterUpdates promises that creations are always
// reconciled; Finalizer promises the finalizer is added before reconciling.
func TestFinalizerWithGenerationFilter(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	h := &hooks{}
	c, err := ctrl.NewController(mgr, "filtered-cleaner", h.reconcile, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnFinalize(finalizer, h.finalize))
	must(t, c.FilterUpdates(ctrl.GenerationChanged))
	ctx := start(t, mgr)

	created, err := widgets.Create(ctx, newWidget(ns, "w", 1))
	must(t, err)
	waitIdle(t, mgr)
	got, err := widgets.Uncached().Get(ctx, ctrl.KeyOf(created))
	must(t, err)
	if !slices.Equal(got.Finalizers, []string{finalizer}) {
		t.Errorf("finalizers on the server: got %v, want [%s]", got.Finalizers, finalizer)
	}
	if reconciled, _, _ := h.calls(); len(reconciled) == 0 {
		// Adding the finalizer changes metadata only, so the server keeps
		// the generation, and the update event of that write is filtered
		// out: it cannot be what reconciles the new Widget.
		t.Errorf("got no reconcile of the new Widget, want at least one")
	}
}

// finalizersOf returns the finalizers of each Widget.
func finalizersOf(ws []*Widget) [][]string {
	var out [][]string
	for _, w := range ws {
		out = append(out, w.Finalizers)
	}
	return out
}

// TestWaitIdleAfterFinalizerRemoval removes a finalizer the way the
// controller does, on a network where the answer to a PATCH is slower than
// the watch: the server deletes the Widget as part of the PATCH that removes
// its last finalizer, and its DELETED event reaches the cache before the
// PATCH returns. Then the manager must still become idle.
func TestWaitIdleAfterFinalizerRemoval(t *testing.T) {
	ns := newNamespace(t)
	cfg := delayResponses(env.Config(), 500*time.Millisecond, func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/widgets/")
	})
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	widgets := newClient[*Widget](t, mgr)
	h := &hooks{}
	c, err := ctrl.NewController(mgr, "cleaner", h.reconcile, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.OnFinalize(finalizer, h.finalize))
	ctx := start(t, mgr)
	created, err := widgets.Create(ctx, newWidget(ns, "w", 1))
	must(t, err)
	waitIdle(t, mgr)

	must(t, widgets.Delete(ctx, ctrl.KeyOf(created), metav1.DeleteOptions{}))
	idle, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.WaitIdle(idle, time.Minute); err != nil {
		// The PATCH returned the Widget at the resourceVersion it had before
		// the deletion; the cache, which had already dropped the Widget,
		// waits for that version to arrive, and it never will.
		t.Errorf("WaitIdle after the Widget was finalized and deleted: got %v, want nil", err)
	}
	if _, err := widgets.Uncached().Get(ctx, ctrl.KeyOf(created)); !apierrors.IsNotFound(err) {
		t.Errorf("Get after the deletion: got %v, want not found", err)
	}
	if _, finalized, _ := h.calls(); len(finalized) != 1 {
		t.Errorf("got %d finalize calls, want 1", len(finalized))
	}
}

// TestWaitIdleUntilFinalizedObjectGone is the other order: the PATCH that
// removes the last finalizer answers before the watch brings the Widget's
// DELETED event. The server deleted the Widget and answered with it as the
// request left it, at the resourceVersion the cache already holds; WaitIdle
// must still wait until the cache no longer holds it, in a cache with a
// label selector too (where a removal the cache cannot tell from leaving
// the selector comes as one).
func TestWaitIdleUntilFinalizedObjectGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ctrl.CacheOptions
	}{
		{"all", ctrl.CacheOptions{}},
		{"selected", ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "w"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			cfg := slowWatches(env.Config(), 200*time.Millisecond, func(r *http.Request) bool {
				return strings.Contains(r.URL.Path, "/widgets")
			})
			mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
			must(t, err)
			widgets := newClient[*Widget](t, mgr)
			h := &hooks{}
			c, err := ctrl.NewController(mgr, "cleaner", h.reconcile, ctrl.ControllerOptions{Cache: tc.opts})
			must(t, err)
			must(t, c.OnFinalize(finalizer, h.finalize))
			ctx := start(t, mgr)
			w := newWidget(ns, "w", 1)
			w.Labels = map[string]string{"app": "w"}
			created, err := widgets.Create(ctx, w)
			must(t, err)
			waitIdle(t, mgr)

			must(t, widgets.Delete(ctx, ctrl.KeyOf(created), metav1.DeleteOptions{}))
			waitIdle(t, mgr)
			if _, ok := c.Cache().Get(ctrl.KeyOf(created)); ok {
				t.Error("the cache holds the Widget after WaitIdle; want it gone (the finalized Widget was deleted)")
			}
			if _, finalized, _ := h.calls(); len(finalized) != 1 {
				t.Errorf("got %d finalize calls, want 1", len(finalized))
			}
		})
	}
}

// TestWaitIdleTerminatingPod writes to a Pod in its grace period: being
// deleted, without finalizers, and kept by the server (no kubelet confirms
// it). Such a write is not one that deleted the object, so WaitIdle does
// not wait for the Pod to go: a write that changes nothing, and one that
// changes a label.
func TestWaitIdleTerminatingPod(t *testing.T) {
	ns := newNamespace(t)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns})
	must(t, err)
	pods := newClient[*corev1.Pod](t, mgr)
	_, err = ctrl.NewCache[*corev1.Pod](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "node-that-never-answers", Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}},
	})
	must(t, err)
	key := ctrl.KeyOf(pod)
	must(t, pods.Delete(ctx, key, metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	cached, err := pods.Get(ctx, key)
	must(t, err)
	if cached.DeletionTimestamp == nil || cached.DeletionGracePeriodSeconds == nil || *cached.DeletionGracePeriodSeconds == 0 {
		t.Fatalf("got deletionTimestamp %v, grace %v; want a Pod in its grace period", cached.DeletionTimestamp, cached.DeletionGracePeriodSeconds)
	}
	for _, patch := range []string{`{}`, `{"metadata":{"labels":{"seen":"yes"}}}`} {
		_, err := pods.Patch(ctx, key, types.MergePatchType, []byte(patch))
		must(t, err)
		idle, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = mgr.WaitIdle(idle, time.Minute)
		cancel()
		if err != nil {
			t.Errorf("WaitIdle after patch %s of a terminating Pod: %v", patch, err)
		}
	}
}

// TestWaitIdleDeleteBeforeCached deletes each object right after its
// Client created it, into a cache made a moment before and still listing:
// the delete's reply often comes before the cache has the object. WaitIdle
// waits for the deletion as well as the create. The Pods, in their grace
// period, are then cached with a deletionTimestamp, and the ConfigMaps,
// deleted at once, are gone.
func TestWaitIdleDeleteBeforeCached(t *testing.T) {
	ns := newNamespace(t)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns})
	must(t, err)
	pods := newClient[*corev1.Pod](t, mgr)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	const n = 30
	for i := range n {
		label := map[string]string{"round": strconv.Itoa(i)}
		opts := ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(label)}
		podCache, err := ctrl.NewCache[*corev1.Pod](mgr, opts)
		must(t, err)
		cmCache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, opts)
		must(t, err)
		p := newPod(ns, fmt.Sprintf("p-%02d", i))
		p.Labels = label
		pod, err := pods.Create(ctx, p)
		must(t, err)
		must(t, pods.Delete(ctx, ctrl.KeyOf(pod), metav1.DeleteOptions{}))
		cm, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%02d", i), Labels: label}})
		must(t, err)
		must(t, configMaps.Delete(ctx, ctrl.KeyOf(cm), metav1.DeleteOptions{}))
		waitIdle(t, mgr)
		if cached, ok := podCache.Get(ctrl.KeyOf(pod)); !ok || cached.DeletionTimestamp == nil {
			t.Errorf("after WaitIdle, the cache has Pod %s: %t, without a deletionTimestamp; want it in its grace period", ctrl.KeyOf(pod), ok)
		}
		if _, ok := cmCache.Get(ctrl.KeyOf(cm)); ok {
			t.Errorf("after WaitIdle, the cache has ConfigMap %s; want it gone", ctrl.KeyOf(cm))
		}
	}
}

// newPod is a Pod bound to a node that never answers: deleted, it stays in
// its grace period.
func newPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: "node-that-never-answers", Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}}}
}
