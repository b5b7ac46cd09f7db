package ctrl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	machinedecl "github.com/typedctrl/ctrl/internal/machine"
	"github.com/typedctrl/ctrl/internal/mergepatch"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/go-logr/logr"

	"github.com/typedctrl/ctrl/internal/binding"
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
	r := &machineRun[T, S]{machine: d, events: events}
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
	for _, s := range d.names {
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
	out, _, res, err := d.advance(ctx, obj, memoryWriter[T]{})
	return out, res, err
}

// A machine at work: one reconcile advances an object by at most one move.

// machineWriter writes the finalizers and the status, returning the object.
type machineWriter[T Object] interface {
	writeFinalizers(ctx context.Context, old, obj T) (T, error)
	writeStatus(ctx context.Context, old, obj T) (T, error)
}

// move is a move the machine wrote.
type move[S ~string] struct {
	from, to S
	next     Next[S]   // with its reason and message set
	entered  time.Time // when the object entered from, if known
}

// The reasons of the moves the machine makes itself.
const (
	reasonCreated     = "Created"
	reasonSpecChanged = "SpecChanged"
	reasonDeleting    = "Deleting"
)

// advance runs one reconcile on obj, which it leaves as it is (the cache's
// own, in a controller), writing through w; it returns the object as last
// written, the move written, and the Result.
func (d *machine[T, S]) advance(ctx context.Context, obj T, w machineWriter[T]) (T, *move[S], Result, error) {
	deleting := obj.GetDeletionTimestamp() != nil
	if d.Finalizer != "" {
		has := slices.Contains(obj.GetFinalizers(), d.Finalizer)
		switch {
		case deleting && !has:
			return obj, nil, Result{}, nil // not waiting for us
		case !has:
			// Before any move: a step may create what cleanup must remove.
			changed := obj.DeepCopyObject().(T)
			changed.SetFinalizers(append(slices.Clone(obj.GetFinalizers()), d.Finalizer))
			out, err := w.writeFinalizers(ctx, obj, changed)
			if err != nil {
				return obj, nil, Result{}, err
			}
			obj = out
		}
	} else if deleting {
		return obj, nil, Result{}, nil
	}

	from := *d.Phase(obj)
	state, known := d.States[from]
	gen := obj.GetGeneration()
	switch {
	case deleting && !d.cleanup[from]:
		return d.makeMove(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: d.Deleting, Reason: reasonDeleting, Message: "the object is being deleted"})
	case deleting && state.Step == nil:
		// The cleanup path is complete.
		changed := obj.DeepCopyObject().(T)
		changed.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == d.Finalizer }))
		out, err := w.writeFinalizers(ctx, obj, changed)
		if apierrors.IsNotFound(err) {
			return obj, nil, Result{}, nil
		}
		return out, nil, Result{}, err
	case from == "":
		return d.makeMove(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: d.Initial, Reason: reasonCreated, Message: "new object"})
	case !known:
		return obj, nil, Result{}, Terminal(fmt.Errorf("phase %q is not a state of the machine", from))
	case !deleting && gen > *d.ObservedGeneration(obj) && state.SpecChanged != "" && state.SpecChanged != from:
		return d.makeMove(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: state.SpecChanged, Reason: reasonSpecChanged,
			Message: fmt.Sprintf("generation %d", gen)})
	case state.Step == nil:
		out, err := d.stay(ctx, obj, obj.DeepCopyObject().(T), w)
		return out, nil, Result{}, err
	}

	before := obj
	obj = obj.DeepCopyObject().(T) // the step's to change
	next, err := state.Step(ctx, obj)
	if err != nil {
		return before, nil, Result{}, fmt.Errorf("state %s: %w", from, err)
	}
	if next.To == "" || next.To == from {
		out, err := d.stay(ctx, before, obj, w)
		return out, nil, Result{RequeueAfter: next.RequeueAfter}, err
	}
	if !slices.Contains(state.To, next.To) {
		return before, nil, Result{}, Terminal(machinedecl.Refuse(from, next.To, state.To))
	}
	return d.makeMove(ctx, before, obj, w, from, next)
}

// makeMove moves obj, changed by a step from before, to next.To, and writes it.
func (d *machine[T, S]) makeMove(ctx context.Context, before, obj T, w machineWriter[T], from S, next Next[S]) (T, *move[S], Result, error) {
	if next.Reason == "" {
		next.Reason = string(next.To)
	}
	if !machinedecl.ValidReason(next.Reason) {
		return before, nil, Result{}, Terminal(fmt.Errorf("%s -> %s: reason %q is not a valid condition reason, such as Provisioned", from, next.To, next.Reason))
	}
	if next.Message == "" {
		next.Message = fmt.Sprintf("entered %s from %s", next.To, from)
	}
	mv := &move[S]{from: from, to: next.To, next: next}
	gen := obj.GetGeneration()
	// A copy: DeepCopyObject may share the slice with the cache's object.
	conds := slices.Clone(*d.Conditions(obj))
	if i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == d.Condition }); i >= 0 {
		mv.entered = conds[i].LastTransitionTime.Time
		conds = slices.Delete(conds, i, i+1)
	}
	status := metav1.ConditionFalse
	if d.States[next.To].Ready {
		status = metav1.ConditionTrue
	}
	// lastTransitionTime changes with every move, not only when the status
	// flips: a waiting state's step reads it as the time it was entered.
	*d.Conditions(obj) = append(conds, metav1.Condition{Type: d.Condition, Status: status, ObservedGeneration: gen,
		LastTransitionTime: metav1.Now(), Reason: next.Reason, Message: next.Message})
	*d.Phase(obj) = next.To
	*d.ObservedGeneration(obj) = gen
	out, err := w.writeStatus(ctx, before, obj)
	if err != nil {
		return before, nil, Result{}, err
	}
	return out, mv, Result{}, nil
}

// stay writes a step's status changes, if any, with observedGeneration.
func (d *machine[T, S]) stay(ctx context.Context, before, obj T, w machineWriter[T]) (T, error) {
	if gen := obj.GetGeneration(); *d.ObservedGeneration(obj) != gen {
		*d.ObservedGeneration(obj) = gen
		conds := d.Conditions(obj)
		if i := slices.IndexFunc(*conds, func(c metav1.Condition) bool { return c.Type == d.Condition }); i >= 0 {
			*conds = slices.Clone(*conds)
			(*conds)[i].ObservedGeneration = gen
		}
	}
	return w.writeStatus(ctx, before, obj)
}

// machineRun is a machine at work in a controller.
type machineRun[T Object, S ~string] struct {
	*machine[T, S]
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
	out, mv, res, err := r.advance(ctx, obj, r)
	var refused *machinedecl.Refused
	if errors.As(err, &refused) {
		r.events.Event(obj, corev1.EventTypeWarning, "TransitionRefused", refused.Error())
	}
	if mv == nil {
		return res, err
	}
	eventType := corev1.EventTypeNormal
	if mv.next.Warning {
		eventType = corev1.EventTypeWarning
	}
	if mv.from == "" {
		r.events.Eventf(out, eventType, mv.next.Reason, "%s: %s", mv.to, mv.next.Message)
	} else {
		r.events.Eventf(out, eventType, mv.next.Reason, "%s -> %s: %s", mv.from, mv.to, mv.next.Message)
	}
	r.metrics.Moved(string(mv.from), string(mv.to), mv.entered)
	logr.FromContextOrDiscard(ctx).Info("moved", "from", mv.from, "to", mv.to, "reason", mv.next.Reason, "generation", out.GetGeneration())
	return res, nil
}

func (r *machineRun[T, S]) writeFinalizers(ctx context.Context, old, obj T) (T, error) {
	return r.ctrl.client.InCluster(keyFrom(ctx, old).Cluster).PatchFrom(ctx, old, obj)
}

func (r *machineRun[T, S]) writeStatus(ctx context.Context, old, obj T) (T, error) {
	patch, err := mergepatch.Status(old, obj)
	if err != nil || patch == nil {
		return old, err
	}
	return r.ctrl.client.PatchStatus(ctx, KeyOf(old).InCluster(keyFrom(ctx, old).Cluster), types.MergePatchType, patch)
}

// memoryWriter writes as the API server would, to memory: Machine.Reconcile's.
type memoryWriter[T Object] struct{}

func (memoryWriter[T]) writeFinalizers(_ context.Context, _, obj T) (T, error) { return obj, nil }

// writeStatus applies the status patch from old to obj, as the server would.
func (memoryWriter[T]) writeStatus(_ context.Context, old, obj T) (T, error) {
	out := binding.New[T]()
	if changed, err := mergepatch.ApplyStatus(old, obj, out); !changed || err != nil {
		return old, err
	}
	return out, nil
}
