package ctrl

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	engine "github.com/typedctrl/ctrl/internal/machine"
)

// Machine declares a state machine over the phase S, a string type such as
// BucketPhase, kept in the status of objects of type T. Run it with
// [NewMachine]; test it one step at a time with [Machine.Reconcile].
//
// Each reconcile makes at most one move: an object with no phase enters
// Initial; a state's Step does its work and returns the next state, one of
// its To, or fails, to stay and be retried with backoff. A state without a
// Step rests until the spec changes ([State].SpecChanged) or the object is
// deleted. A move writes the phase, status.observedGeneration and the
// condition with the step's status changes (see the package's guarantees:
// Once). Steps must be idempotent: a step reruns if the process dies before
// its write, or its write conflicts.
type Machine[T Object, S ~string] struct {
	// Initial is entered by an object with no phase, reason "Created". Required.
	Initial S
	// States declares every state. A name is the default reason of moves
	// into it, so a valid condition reason, such as Provisioning. Required.
	States map[S]State[T, S]
	// Phase returns a pointer to the object's phase, a field of its status:
	// func(b *Bucket) *BucketPhase { return &b.Status.Phase }. Required.
	Phase func(T) *S
	// Conditions returns a pointer to the status conditions. Required.
	Conditions func(T) *[]metav1.Condition
	// ObservedGeneration returns a pointer to status.observedGeneration, which
	// every status write sets to the generation it acted on. Required.
	ObservedGeneration func(T) *int64
	// Condition is the type of the machine's condition: True in [State].Ready
	// states, else False, with the last move's reason and message and the
	// time the state was entered. Default: "Ready".
	Condition string
	// Finalizer, such as "example.com/cleanup", is added before an object's
	// first move; a deleted object then moves to Deleting (reason
	// "Deleting") from any state, along the cleanup path (the states
	// reachable from Deleting, none reachable from Initial), and the
	// finalizer is removed in a state without a Step. Default: none.
	Finalizer string
	// Deleting, the first state of the cleanup path, goes with Finalizer:
	// both or neither.
	Deleting S
}

// State declares one state of a [Machine].
type State[T Object, S ~string] struct {
	// Step does the state's work on obj, a copy, and says what comes next.
	// Its status changes are written with its move (or alone if it stays),
	// no other changes. Default: none: the object rests here.
	Step func(ctx context.Context, obj T) (Next[S], error)
	// To lists the states Step may move to; another is refused with a
	// terminal error naming both, and the object stays. Default: none.
	To []S
	// Ready marks a state where the spec is met: the condition is True.
	Ready bool
	// SpecChanged is where an object in this state moves, with reason
	// "SpecChanged", when metadata.generation passes status.observedGeneration;
	// it need not be in To. Default: none: Step sees the new spec.
	SpecChanged S
}

// Next is what a [State]'s step decided. The zero value stays and waits.
type Next[S ~string] struct {
	// To is the state to move to. Default: stay.
	To S
	// Reason is the move's UpperCamelCase reason. Default: the name of To.
	Reason string
	// Message says what happened. Default: "entered <To> from <state>".
	Message string
	// Warning makes the move's Event a Warning. Default: Normal.
	Warning bool
	// RequeueAfter, if positive and the object stays, runs the step again
	// after this long unless a change runs it sooner. Default: only a change.
	RequeueAfter time.Duration
}

// compile checks m and hands it to the engine, or lists every problem.
func (m Machine[T, S]) compile() (*engine.Engine[T, S], error) {
	states := make(map[S]engine.Stage[T, S], len(m.States))
	for s, st := range m.States {
		var step func(context.Context, T) (engine.Next[S], error)
		if st.Step != nil {
			step = func(ctx context.Context, obj T) (engine.Next[S], error) {
				next, err := st.Step(ctx, obj)
				return engine.Next[S](next), err
			}
		}
		states[s] = engine.Stage[T, S]{Step: step, To: st.To, Ready: st.Ready, SpecChanged: st.SpecChanged}
	}
	return engine.Compile(engine.Spec[T, S]{Initial: m.Initial, States: states, Phase: m.Phase, Conditions: m.Conditions,
		ObservedGeneration: m.ObservedGeneration, Condition: m.Condition, Finalizer: m.Finalizer, Deleting: m.Deleting,
		Terminal: Terminal})
}
