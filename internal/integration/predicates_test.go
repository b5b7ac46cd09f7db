package integration_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// generations counts a controller's reconciles by the metadata.generation
// of the object it was given.
type generations struct {
	mu     sync.Mutex
	counts map[int64]int
}

func (g *generations) reconcile(_ context.Context, w *Widget) (ctrl.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.counts == nil {
		g.counts = map[int64]int{}
	}
	g.counts[w.Generation]++
	return ctrl.Result{}, nil
}

func (g *generations) get() map[int64]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.counts)
}

// TestGenerationChanged drives a Widget through writes that do and do not
// bump its generation on a real server, and counts the reconciles of a
// controller filtered with GenerationChanged next to one that is not.
func TestGenerationChanged(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	var filtered, all generations
	c, err := ctrl.NewController(mgr, "filtered", filtered.reconcile, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.FilterUpdates(ctrl.GenerationChanged))
	_, err = ctrl.NewController(mgr, "all", all.reconcile, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	key := ctrl.Key{Namespace: ns, Name: "w"}

	// Each step waits until the manager is idle, so its events have been
	// reconciled or filtered out before the next write. The counts are
	// cumulative.
	steps := []struct {
		name         string
		write        func() (*Widget, error)
		wantGen      int64
		wantFiltered map[int64]int
		wantAll      map[int64]int
	}{
		{"create", func() (*Widget, error) { return widgets.Create(ctx, newWidget(ns, "w", 1)) },
			1, map[int64]int{1: 1}, map[int64]int{1: 1}},
		{"status only", func() (*Widget, error) {
			w, err := widgets.Get(ctx, key)
			if err != nil {
				return nil, err
			}
			w.Status.Phase = "Ready"
			return widgets.UpdateStatus(ctx, w)
		}, 1, map[int64]int{1: 1}, map[int64]int{1: 2}},
		{"labels only", func() (*Widget, error) {
			return widgets.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}}}`))
		}, 1, map[int64]int{1: 1}, map[int64]int{1: 3}},
		{"spec", func() (*Widget, error) {
			return widgets.Patch(ctx, key, types.MergePatchType, []byte(`{"spec":{"size":2}}`))
		}, 2, map[int64]int{1: 1, 2: 1}, map[int64]int{1: 3, 2: 1}},
		{"status after spec", func() (*Widget, error) {
			return widgets.PatchStatus(ctx, key, types.MergePatchType, []byte(`{"status":{"observedSize":2}}`))
		}, 2, map[int64]int{1: 1, 2: 1}, map[int64]int{1: 3, 2: 2}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			written, err := s.write()
			must(t, err)
			waitIdle(t, mgr)
			got, err := widgets.Uncached().Get(ctx, key)
			must(t, err)
			if got.Generation != s.wantGen || written.Generation != s.wantGen {
				t.Errorf("generation: got %d on the server, %d returned by the write; want %d", got.Generation, written.Generation, s.wantGen)
			}
			if got, want := fmt.Sprint(filtered.get()), fmt.Sprint(s.wantFiltered); got != want {
				t.Errorf("filtered reconciles by generation: got %s, want %s", got, want)
			}
			if got, want := fmt.Sprint(all.get()), fmt.Sprint(s.wantAll); got != want {
				t.Errorf("unfiltered reconciles by generation: got %s, want %s", got, want)
			}
		})
	}
}
