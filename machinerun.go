package ctrl

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/go-logr/logr"

	engine "github.com/typedctrl/ctrl/internal/machine"
	"github.com/typedctrl/ctrl/internal/mergepatch"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// NewMachine returns a controller named name that runs machine on the
// objects of type T; wire it further like any [Controller]. It reconciles
// an object when it is created, when its phase, generation or
// observedGeneration changes ([Controller.FilterUpdates] adds more), and
// while it is deleted. The machine owns its finalizer (do not use
// OnFinalize); an object leaving the selector keeps it. Moves are Events
// from component name and ctrl_machine_* metrics labeled with name and
// state. UnsafeDisableDeepCopy is ignored. It returns an error if machine
// is incomplete or inconsistent, T has no status subresource, Events
// cannot be written, or as [NewController] does.
func NewMachine[T Object, S ~string](m *Manager, name string, machine Machine[T, S], opts ControllerOptions) (*Controller[T], error) {
	d, err := machine.compile()
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %w", name, err)
	}
	info, err := resolve[T](m)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %w", name, err)
	}
	if !info.Status {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %s has no status subresource, where the machine writes its moves", name, info)
	}
	gr := info.GVR.GroupResource()
	m.grants.Need(schema.GroupResource{Group: gr.Group, Resource: gr.Resource + "/status"}, "patch")
	if machine.Finalizer != "" {
		m.grants.Need(gr, "patch")
	}
	reg := m.opts.Registerer
	if m.registry != nil {
		reg = m.registry
	}
	met, err := metrics.NewMachines(reg)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: registering the metrics: %w", name, err)
	}
	events, err := NewRecorder[T](m, name)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %w", name, err)
	}
	r := &machineRun[T, S]{Engine: d, events: events}
	opts.CopyObject = false // reconcile reads the cache again, and copies
	c, err := NewController(m, name, r.reconcile, opts)
	if err != nil {
		return nil, err
	}
	r.ctrl = c
	if err := c.FilterUpdates(r.changed); err != nil {
		return nil, err
	}
	var states []string
	var edges [][2]string
	for _, s := range d.Names {
		states = append(states, string(s))
		for _, to := range d.States[s].To {
			edges = append(edges, [2]string{string(s), string(to)})
		}
	}
	r.metrics = met.Machine(name, states, edges, func(add func(string)) {
		for _, obj := range c.Cache().List("", nil) {
			add(string(*d.Phase(obj)))
		}
	})
	return c, nil
}

// Reconcile runs one reconcile of the machine on obj without a manager, for
// unit tests, and returns the object as the server would then hold it
// (finalizer and status written, a step's other changes not), the Result
// and the error; obj is not changed, no Event is emitted, nothing counted.
// Set metadata.generation or deletionTimestamp to play a spec change or a
// deletion. On error the object holds what was written before the failure.
func (m Machine[T, S]) Reconcile(ctx context.Context, obj T) (T, Result, error) {
	d, err := m.compile()
	if err != nil {
		return obj, Result{}, fmt.Errorf("ctrl: Machine.Reconcile: %w", err)
	}
	out, _, after, err := d.Advance(ctx, obj, engine.Memory[T]{})
	return out, Result{RequeueAfter: after}, err
}

// machineRun is a machine at work in a controller.
type machineRun[T Object, S ~string] struct {
	*engine.Engine[T, S]
	ctrl    *Controller[T]
	events  *Recorder[T]
	metrics metrics.Machine
}

// changed is the machine's update filter: the updates that can make it
// move. Finalizer changes are left out: the machine makes them itself,
// right before a move whose own update follows.
func (r *machineRun[T, S]) changed(old, obj T) bool {
	return *r.Phase(old) != *r.Phase(obj) || old.GetGeneration() != obj.GetGeneration() ||
		*r.ObservedGeneration(old) != *r.ObservedGeneration(obj)
}

// reconcile is one advance and a written move's Event, log line and
// metrics; cached is the cache's own object.
func (r *machineRun[T, S]) reconcile(ctx context.Context, cached T) (Result, error) {
	latest, ok := r.ctrl.cache.Get(keyFrom(ctx, cached))
	if !ok {
		return Result{}, nil
	}
	obj := latest // shared: advance copies what it changes
	out, mv, after, err := r.Advance(ctx, obj, r)
	var refused *engine.Refused
	if errors.As(err, &refused) {
		r.events.Event(obj, corev1.EventTypeWarning, "TransitionRefused", refused.Error())
	}
	if mv == nil {
		return Result{RequeueAfter: after}, err
	}
	eventType := corev1.EventTypeNormal
	if mv.Next.Warning {
		eventType = corev1.EventTypeWarning
	}
	if mv.From == "" {
		r.events.Eventf(out, eventType, mv.Next.Reason, "%s: %s", mv.To, mv.Next.Message)
	} else {
		r.events.Eventf(out, eventType, mv.Next.Reason, "%s -> %s: %s", mv.From, mv.To, mv.Next.Message)
	}
	r.metrics.Moved(string(mv.From), string(mv.To), mv.Entered)
	logr.FromContextOrDiscard(ctx).Info("moved", "from", mv.From, "to", mv.To, "reason", mv.Next.Reason, "generation", out.GetGeneration())
	return Result{}, nil
}

func (r *machineRun[T, S]) WriteFinalizers(ctx context.Context, old, obj T) (T, error) {
	return r.ctrl.client.InCluster(keyFrom(ctx, old).Cluster).PatchFrom(ctx, old, obj)
}

func (r *machineRun[T, S]) WriteStatus(ctx context.Context, old, obj T) (T, error) {
	patch, err := mergepatch.Status(old, obj)
	if err != nil || patch == nil {
		return old, err
	}
	return r.ctrl.client.PatchStatus(ctx, KeyOf(old).InCluster(keyFrom(ctx, old).Cluster), types.MergePatchType, patch)
}
