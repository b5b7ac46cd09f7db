package machine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/mergepatch"
)

// Object is an API object: metadata and a deep copy.
type Object interface {
	metav1.Object
	runtime.Object
}

// Next is what a step decided, field for field ctrl.Next, so that one
// converts to the other.
type Next[S ~string] struct {
	To           S
	Reason       string
	Message      string
	Warning      bool
	RequeueAfter time.Duration
}

// Stage is one state as the engine runs it.
type Stage[T Object, S ~string] struct {
	Step        func(ctx context.Context, obj T) (Next[S], error) // nil: the object rests
	To          []S
	Ready       bool
	SpecChanged S
}

// Spec is a machine as ctrl.Machine declares it, its steps converted.
type Spec[T Object, S ~string] struct {
	Initial            S
	States             map[S]Stage[T, S]
	Phase              func(T) *S
	Conditions         func(T) *[]metav1.Condition
	ObservedGeneration func(T) *int64
	Condition          string // "": "Ready"
	Finalizer          string
	Deleting           S
	// Terminal marks an error the controller must not retry.
	Terminal func(error) error
}

// Engine is a checked Spec: one Advance moves an object at most once.
type Engine[T Object, S ~string] struct {
	Spec[T, S]
	Names   []S        // the states, sorted
	cleanup map[S]bool // the states reachable from Deleting
}

// Compile checks s and copies its states, or lists every problem.
func Compile[T Object, S ~string](s Spec[T, S]) (*Engine[T, S], error) {
	var errs []string
	if s.Phase == nil || s.Conditions == nil || s.ObservedGeneration == nil {
		errs = append(errs, "Phase, Conditions and ObservedGeneration must all be set")
	}
	if s.Condition == "" {
		s.Condition = "Ready"
	}
	states := maps.Clone(s.States)
	decl := Machine{Initial: string(s.Initial), States: map[string]State{},
		Condition: s.Condition, Finalizer: s.Finalizer, Deleting: string(s.Deleting)}
	for name, st := range states {
		st.To = slices.Clone(st.To)
		states[name] = st
		to := make([]string, len(st.To))
		for i, t := range st.To {
			to[i] = string(t)
		}
		decl.States[string(name)] = State{Step: st.Step != nil, To: to, SpecChanged: string(st.SpecChanged)}
	}
	s.States = states
	cleanup, problems := Check(decl)
	if errs = append(errs, problems...); len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	e := &Engine[T, S]{Spec: s, Names: slices.Sorted(maps.Keys(states)), cleanup: map[S]bool{}}
	for name := range cleanup {
		e.cleanup[S(name)] = true
	}
	return e, nil
}

// Writer writes the finalizers and the status, returning the object.
type Writer[T Object] interface {
	WriteFinalizers(ctx context.Context, old, obj T) (T, error)
	WriteStatus(ctx context.Context, old, obj T) (T, error)
}

// Move is a move the engine wrote.
type Move[S ~string] struct {
	From, To S
	Next     Next[S]   // with its reason and message set
	Entered  time.Time // when the object entered From, if known
}

// The reasons of the moves the machine makes itself.
const (
	reasonCreated     = "Created"
	reasonSpecChanged = "SpecChanged"
	reasonDeleting    = "Deleting"
)

// Advance runs one reconcile on obj, which it leaves as it is (the cache's
// own, in a controller), writing through w; it returns the object as last
// written, the move written, and when to run again if nothing changes.
func (e *Engine[T, S]) Advance(ctx context.Context, obj T, w Writer[T]) (T, *Move[S], time.Duration, error) {
	deleting := obj.GetDeletionTimestamp() != nil
	if e.Finalizer != "" {
		has := slices.Contains(obj.GetFinalizers(), e.Finalizer)
		switch {
		case deleting && !has:
			return obj, nil, 0, nil // not waiting for us
		case !has:
			// Before any move: a step may create what cleanup must remove.
			changed := obj.DeepCopyObject().(T)
			changed.SetFinalizers(append(slices.Clone(obj.GetFinalizers()), e.Finalizer))
			out, err := w.WriteFinalizers(ctx, obj, changed)
			if err != nil {
				return obj, nil, 0, err
			}
			obj = out
		}
	} else if deleting {
		return obj, nil, 0, nil
	}

	from := *e.Phase(obj)
	state, known := e.States[from]
	gen := obj.GetGeneration()
	switch {
	case deleting && !e.cleanup[from]:
		return e.move(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: e.Deleting, Reason: reasonDeleting, Message: "the object is being deleted"})
	case deleting && state.Step == nil:
		// The cleanup path is complete.
		changed := obj.DeepCopyObject().(T)
		changed.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == e.Finalizer }))
		out, err := w.WriteFinalizers(ctx, obj, changed)
		if apierrors.IsNotFound(err) {
			return obj, nil, 0, nil
		}
		return out, nil, 0, err
	case from == "":
		return e.move(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: e.Initial, Reason: reasonCreated, Message: "new object"})
	case !known:
		return obj, nil, 0, e.Terminal(fmt.Errorf("phase %q is not a state of the machine", from))
	case !deleting && gen > *e.ObservedGeneration(obj) && state.SpecChanged != "" && state.SpecChanged != from:
		return e.move(ctx, obj, obj.DeepCopyObject().(T), w, from, Next[S]{To: state.SpecChanged, Reason: reasonSpecChanged,
			Message: fmt.Sprintf("generation %d", gen)})
	case state.Step == nil:
		out, err := e.stay(ctx, obj, obj.DeepCopyObject().(T), w)
		return out, nil, 0, err
	}

	before := obj
	obj = obj.DeepCopyObject().(T) // the step's to change
	next, err := state.Step(ctx, obj)
	if err != nil {
		return before, nil, 0, fmt.Errorf("state %s: %w", from, err)
	}
	if next.To == "" || next.To == from {
		out, err := e.stay(ctx, before, obj, w)
		return out, nil, next.RequeueAfter, err
	}
	if !slices.Contains(state.To, next.To) {
		return before, nil, 0, e.Terminal(Refuse(from, next.To, state.To))
	}
	return e.move(ctx, before, obj, w, from, next)
}

// move moves obj, changed by a step from before, to next.To, and writes it.
func (e *Engine[T, S]) move(ctx context.Context, before, obj T, w Writer[T], from S, next Next[S]) (T, *Move[S], time.Duration, error) {
	if next.Reason == "" {
		next.Reason = string(next.To)
	}
	if !ValidReason(next.Reason) {
		return before, nil, 0, e.Terminal(fmt.Errorf("%s -> %s: reason %q is not a valid condition reason, such as Provisioned", from, next.To, next.Reason))
	}
	if next.Message == "" {
		next.Message = fmt.Sprintf("entered %s from %s", next.To, from)
	}
	mv := &Move[S]{From: from, To: next.To, Next: next}
	gen := obj.GetGeneration()
	// A copy: DeepCopyObject may share the slice with the cache's object.
	conds := slices.Clone(*e.Conditions(obj))
	if i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == e.Condition }); i >= 0 {
		mv.Entered = conds[i].LastTransitionTime.Time
		conds = slices.Delete(conds, i, i+1)
	}
	status := metav1.ConditionFalse
	if e.States[next.To].Ready {
		status = metav1.ConditionTrue
	}
	// lastTransitionTime changes with every move, not only when the status
	// flips: a waiting state's step reads it as the time it was entered.
	*e.Conditions(obj) = append(conds, metav1.Condition{Type: e.Condition, Status: status, ObservedGeneration: gen,
		LastTransitionTime: metav1.Now(), Reason: next.Reason, Message: next.Message})
	*e.Phase(obj) = next.To
	*e.ObservedGeneration(obj) = gen
	out, err := w.WriteStatus(ctx, before, obj)
	if err != nil {
		return before, nil, 0, err
	}
	return out, mv, 0, nil
}

// stay writes a step's status changes, if any, with observedGeneration.
func (e *Engine[T, S]) stay(ctx context.Context, before, obj T, w Writer[T]) (T, error) {
	if gen := obj.GetGeneration(); *e.ObservedGeneration(obj) != gen {
		*e.ObservedGeneration(obj) = gen
		conds := e.Conditions(obj)
		if i := slices.IndexFunc(*conds, func(c metav1.Condition) bool { return c.Type == e.Condition }); i >= 0 {
			*conds = slices.Clone(*conds)
			(*conds)[i].ObservedGeneration = gen
		}
	}
	return w.WriteStatus(ctx, before, obj)
}

// Memory writes as the API server would, to memory: for ctrl.Machine.Reconcile.
type Memory[T Object] struct{}

// WriteFinalizers returns obj.
func (Memory[T]) WriteFinalizers(_ context.Context, _, obj T) (T, error) { return obj, nil }

// WriteStatus applies the status patch from old to obj, as the server would.
func (Memory[T]) WriteStatus(_ context.Context, old, obj T) (T, error) {
	out := binding.New[T]()
	if changed, err := mergepatch.ApplyStatus(old, obj, out); !changed || err != nil {
		return old, err
	}
	return out, nil
}
