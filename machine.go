package ctrl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/go-logr/logr"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// A state machine keeps an object's progress in a phase of its status. The
// user declares the states, the moves each state's step may make, and where
// cleanup starts; the machine runs one step per reconcile and writes each
// move to the status subresource with the object's resourceVersion, so that
// a move is written once or not at all, never from stale state.

// Machine declares a state machine over the phase S, a string type such as
// BucketPhase, kept in the status of objects of type T. Run it with
// [NewMachine]; test it one step at a time with [Machine.Reconcile].
//
// Each reconcile makes at most one move. An object with no phase enters
// Initial. An object in a state with a Step runs it: the step does the
// state's work and returns where to go next, which must be one of the
// state's To; a step that fails stays in its state and is retried with
// backoff. An object in a state without a Step rests there until its spec
// changes (see [State].SpecChanged) or it is deleted.
//
// Each move sets the phase, status.observedGeneration, and the machine's
// condition (type Condition) with the move's reason and message, and writes
// them, with whatever else the step changed in the status, through the
// status subresource. The write carries the resourceVersion of the object
// the step saw: if the object changed meanwhile, the write fails with a
// conflict and the reconcile runs again on the newer object, so a move is
// never written twice nor over a change the step did not see. Once
// written, the move is reported by an Event about the object and counted
// in the ctrl_machine_* metrics.
//
// Steps must be idempotent: a step runs again when the process dies
// between its work and the write of its move, and when its write conflicts.
type Machine[T Object, S ~string] struct {
	// Initial is the state an object enters when its phase is empty: a new
	// object. The move's reason is "Created". Required.
	Initial S
	// States declares every state and what it does. A state's name is the
	// default reason of the moves into it, so it must be a valid condition
	// reason, such as Provisioning. Required.
	States map[S]State[T, S]
	// Phase returns a pointer to the object's phase, a field of its status:
	// func(b *Bucket) *BucketPhase { return &b.Status.Phase }. Required.
	Phase func(T) *S
	// Conditions returns a pointer to the object's status conditions.
	// Required.
	Conditions func(T) *[]metav1.Condition
	// ObservedGeneration returns a pointer to the object's
	// status.observedGeneration, which every status write sets to the
	// generation it acted on. Required.
	ObservedGeneration func(T) *int64
	// Condition is the type of the condition the machine keeps in the
	// object's status: True in the states marked [State].Ready, False in
	// the others, with the reason and message of the last move, and, as
	// its lastTransitionTime, the time the object entered its state.
	// Default: "Ready".
	Condition string
	// Finalizer, a qualified name such as "example.com/cleanup", makes
	// cleanup part of the machine: the machine adds the finalizer before
	// an object's first move, and when the object is deleted, moves it to
	// Deleting (reason "Deleting") from whatever state it is in. The states
	// reachable from Deleting form the cleanup path, which shares no state
	// with those reachable from Initial; the finalizer is removed, letting
	// the deletion complete, only once the path reaches a state without a
	// Step. Default: none: a deleted object goes at once, wherever it
	// stands.
	Finalizer string
	// Deleting is the first state of the cleanup path. Required with
	// Finalizer, and only with it.
	Deleting S
}

// State declares one state of a [Machine].
type State[T Object, S ~string] struct {
	// Step does the state's work on obj, a copy it may change, and says
	// what comes next. Changes it makes to obj's status are written with
	// its move, or alone if it stays; other changes are not written.
	// Default: none: the object rests in this state.
	Step func(ctx context.Context, obj T) (Next[S], error)
	// To lists the states Step may move to. A move to any other state is
	// refused with a terminal error that names both states, and the object
	// stays where it is. Default: none.
	To []S
	// Ready marks a state in which the object has what its spec asks for:
	// the machine's condition is True in it. Default: false.
	Ready bool
	// SpecChanged is the state an object in this state moves to when its
	// spec changes, that is when metadata.generation passes
	// status.observedGeneration, with the reason "SpecChanged"; for
	// example from Ready back to Provisioning. It need not be in To.
	// Default: none: the object stays, and Step sees the new spec.
	SpecChanged S
}

// Next is what a [State]'s step decided. The zero value stays in the
// state and waits for the next change.
type Next[S ~string] struct {
	// To is the state to move to. Default: stay.
	To S
	// Reason is the move's reason, in the condition and the Event: an
	// UpperCamelCase word. Default: the name of To.
	Reason string
	// Message says what happened, for people. Default: "entered <To>
	// from <state>".
	Message string
	// Warning makes the move's Event a Warning, for moves into failure
	// states. Default: a Normal Event.
	Warning bool
	// RequeueAfter, if positive and the object stays, runs the step again
	// after this long, unless a change runs it sooner. Default: only a
	// change runs it again.
	RequeueAfter time.Duration
}

// NewMachine returns a controller named name that runs machine on the
// objects of type T. Wire it further like any [Controller]: [Owns] and
// [Watches] make changes to other objects run the step of the object they
// map to.
//
// The controller reconciles an object when it is created, when its phase,
// generation or observedGeneration changes, and while it is being deleted;
// status and metadata changes by others that touch none of these do not run
// a step, and [Controller.FilterUpdates] adds to this list. A reconcile
// that finds a write this program made to the object not yet in the cache
// waits for it instead of stepping from the older state. Do not use the
// controller's OnFinalize: the machine owns its finalizer. An object that
// leaves the cache's selector (ControllerOptions.Cache) carrying the
// finalizer keeps it. ControllerOptions.UnsafeDisableDeepCopy is ignored:
// each step gets its own copy.
//
// Moves are reported as Events from component name, and counted in
// ctrl_machine_objects (objects per state, read from the controller's cache
// at each scrape), ctrl_machine_transitions_total and
// ctrl_machine_state_duration_seconds, labeled with name and declared
// states only.
//
// It returns an error if machine is incomplete or inconsistent (naming what
// is wrong), if T has no status subresource, if Events cannot be written, or
// for the reasons of [NewController].
func NewMachine[T Object, S ~string](m *Manager, name string, machine Machine[T, S], opts ControllerOptions) (*Controller[T], error) {
	d, err := machine.compile()
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %w", name, err)
	}
	info, err := binding.Lookup[T]()
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %w", name, err)
	}
	if !info.Status {
		return nil, fmt.Errorf("ctrl: NewMachine %q: %s has no status subresource, where the machine writes its moves", name, info)
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
	opts.UnsafeDisableDeepCopy = true // reconcile reads the cache again, and copies
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

// Reconcile runs one reconcile of the machine on obj without a manager, for unit
// tests: it makes the move the machine would make, or runs the step of
// obj's state, and returns the object as the API server would hold it
// afterwards: obj with the machine's finalizer added or removed and the new
// status, but none of a step's changes outside the status. It also returns
// the Result the reconcile would return, and its error, if any. obj itself
// is not changed. Steps run as they would in a controller, with ctx; their
// clients, if any, do make requests. No Event is emitted and nothing is
// counted. Set metadata.generation by hand to play a spec change, and
// metadata.deletionTimestamp to play a deletion.
//
// Calling Step until the phase stops changing runs obj to a resting state.
// On error the returned object still holds what was written before it
// failed, such as the finalizer added before a step that failed.
func (m Machine[T, S]) Reconcile(ctx context.Context, obj T) (T, Result, error) {
	d, err := m.compile()
	if err != nil {
		return obj, Result{}, fmt.Errorf("ctrl: Machine.Reconcile: %w", err)
	}
	out, _, res, err := d.advance(ctx, obj.DeepCopyObject().(T), memoryWriter[T]{})
	return out, res, err
}

// machine is a Machine that passed its checks.
type machine[T Object, S ~string] struct {
	Machine[T, S]
	names   []S        // the states, sorted
	cleanup map[S]bool // the states reachable from Deleting
}

// conditionReason is the format of metav1.Condition's reason.
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// compile checks m and returns it ready to run, with its own copy of the
// states, or an error that lists every problem.
func (m Machine[T, S]) compile() (*machine[T, S], error) {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if m.Phase == nil || m.Conditions == nil || m.ObservedGeneration == nil {
		fail("Phase, Conditions and ObservedGeneration must all be set")
	}
	states := maps.Clone(m.States)
	for s, st := range states {
		st.To = slices.Clone(st.To)
		states[s] = st
	}
	m.States = states
	declared := func(s S) bool { _, ok := states[s]; return ok }
	names := slices.Sorted(maps.Keys(states))
	switch {
	case len(states) == 0:
		fail("no States")
	case !declared(m.Initial):
		fail("Initial %q is not a declared state", m.Initial)
	}
	for _, s := range names {
		st := states[s]
		if !conditionReason.MatchString(string(s)) {
			fail("state %q: a state's name must be a valid condition reason, such as Provisioning", s)
		}
		if st.Step == nil && len(st.To) > 0 {
			fail("state %s: To without a Step: only a step moves an object on", s)
		}
		for _, to := range st.To {
			if !declared(to) {
				fail("state %s: To names %q, which is not a declared state", s, to)
			}
		}
		if st.SpecChanged != "" && !declared(st.SpecChanged) {
			fail("state %s: SpecChanged names %q, which is not a declared state", s, st.SpecChanged)
		}
	}
	if m.Condition == "" {
		m.Condition = "Ready"
	} else if bad := validation.IsQualifiedName(m.Condition); len(bad) > 0 {
		fail("Condition %q is not a valid condition type: %s", m.Condition, strings.Join(bad, "; "))
	}
	d := &machine[T, S]{Machine: m, names: names, cleanup: map[S]bool{}}
	switch {
	case m.Finalizer == "" && m.Deleting == "":
	case m.Finalizer == "" || m.Deleting == "":
		fail("Finalizer and Deleting go together: set both for a cleanup path, or neither")
	case len(apivalidation.ValidateFinalizerName(m.Finalizer, nil)) > 0 || !strings.Contains(m.Finalizer, "/"):
		fail("Finalizer %q: want a qualified name like example.com/cleanup", m.Finalizer)
	case !declared(m.Deleting):
		fail("Deleting %q is not a declared state", m.Deleting)
	default:
		// A state on both paths would let a deleted object that is there
		// count as cleaned up.
		d.cleanup = reachable(states, m.Deleting, false)
		live := reachable(states, m.Initial, true)
		for _, s := range names {
			if d.cleanup[s] && live[s] {
				fail("state %s is on the cleanup path from %s and reachable from %s: the cleanup path must be a path of its own", s, m.Deleting, m.Initial)
			}
		}
		if !slices.ContainsFunc(names, func(s S) bool { return d.cleanup[s] && states[s].Step == nil }) {
			fail("the cleanup path from %s never reaches a state without a Step, where the finalizer is removed", m.Deleting)
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return d, nil
}

// reachable returns the states reachable from start through To, and
// through SpecChanged if specChanges is set.
func reachable[T Object, S ~string](states map[S]State[T, S], start S, specChanges bool) map[S]bool {
	seen := map[S]bool{}
	for next := []S{start}; len(next) > 0; next = next[1:] {
		s := next[0]
		st, ok := states[s]
		if seen[s] || !ok {
			continue
		}
		seen[s] = true
		next = append(next, st.To...)
		if specChanges && st.SpecChanged != "" {
			next = append(next, st.SpecChanged)
		}
	}
	return seen
}

// machineWriter writes what the machine changed: the finalizers, and the
// status. Each returns the object as written.
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

// advance runs one reconcile of the machine on obj, its own copy, writing
// through w: the whole fate of an object is in the switch below. It returns
// the object as last written, the move it wrote, if any, and the Result.
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
		return d.move(ctx, obj.DeepCopyObject().(T), obj, w, from, Next[S]{To: d.Deleting, Reason: reasonDeleting, Message: "the object is being deleted"})
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
		return d.move(ctx, obj.DeepCopyObject().(T), obj, w, from, Next[S]{To: d.Initial, Reason: reasonCreated, Message: "new object"})
	case !known:
		return obj, nil, Result{}, Terminal(fmt.Errorf("phase %q is not a state of the machine", from))
	case !deleting && gen > *d.ObservedGeneration(obj) && state.SpecChanged != "" && state.SpecChanged != from:
		return d.move(ctx, obj.DeepCopyObject().(T), obj, w, from, Next[S]{To: state.SpecChanged, Reason: reasonSpecChanged,
			Message: fmt.Sprintf("generation %d", gen)})
	case state.Step == nil:
		out, err := d.stay(ctx, obj, obj.DeepCopyObject().(T), w)
		return out, nil, Result{}, err
	}

	before := obj.DeepCopyObject().(T)
	next, err := state.Step(ctx, obj)
	if err != nil {
		return before, nil, Result{}, fmt.Errorf("state %s: %w", from, err)
	}
	if next.To == "" || next.To == from {
		out, err := d.stay(ctx, before, obj, w)
		return out, nil, Result{RequeueAfter: next.RequeueAfter}, err
	}
	if !slices.Contains(state.To, next.To) {
		return before, nil, Result{}, Terminal(refuse(from, next.To, state.To))
	}
	return d.move(ctx, before, obj, w, from, next)
}

// move moves obj, changed by a step from before, to next.To, and writes it.
func (d *machine[T, S]) move(ctx context.Context, before, obj T, w machineWriter[T], from S, next Next[S]) (T, *move[S], Result, error) {
	if next.Reason == "" {
		next.Reason = string(next.To)
	}
	if !conditionReason.MatchString(next.Reason) {
		return before, nil, Result{}, Terminal(fmt.Errorf("%s -> %s: reason %q is not a valid condition reason, such as Provisioned", from, next.To, next.Reason))
	}
	if next.Message == "" {
		next.Message = fmt.Sprintf("entered %s from %s", next.To, from)
	}
	mv := &move[S]{from: from, to: next.To, next: next}
	gen := obj.GetGeneration()
	// A copy: the object's DeepCopyObject may share the slice with the
	// cache's object.
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
	// flips: the condition is about the state, so a new state is a new
	// condition, and its time is what the step of a waiting state reads.
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

// stay writes what a step changed in the status of obj since before, if
// anything, with observedGeneration brought up to date.
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

// refusedError is a move a step asked for that its state does not declare.
type refusedError struct {
	from, to string
	allowed  string
}

func refuse[S ~string](from, to S, allowed []S) *refusedError {
	e := &refusedError{from: string(from), to: string(to), allowed: "nowhere"}
	if len(allowed) > 0 {
		names := make([]string, len(allowed))
		for i, s := range allowed {
			names[i] = string(s)
		}
		e.allowed = strings.Join(names, ", ")
	}
	return e
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%s -> %s is not a declared transition (%s may go to %s)", e.from, e.to, e.from, e.allowed)
}

// machineRun is a machine at work in a controller.
type machineRun[T Object, S ~string] struct {
	*machine[T, S]
	ctrl    *Controller[T]
	events  *Recorder[T]
	metrics metrics.Machine
}

// changed is the machine's update filter: the updates that can make it
// move. Other finalizer changes are left out: the machine makes them
// itself, right before a move whose own update follows; and the update
// that brings a write the machine waits for passes anyway (see
// Controller.awaitOwnWrite).
func (r *machineRun[T, S]) changed(old, obj T) bool {
	return *r.Phase(old) != *r.Phase(obj) || old.GetGeneration() != obj.GetGeneration() ||
		*r.ObservedGeneration(old) != *r.ObservedGeneration(obj)
}

// reconcile is the controller's reconcile function: one advance, and, once
// a move is written, its Event, log line and metrics. cached is the cache's
// object itself (UnsafeDisableDeepCopy), read before the reconcile began.
func (r *machineRun[T, S]) reconcile(ctx context.Context, cached T) (Result, error) {
	// A step must not run on state older than this program's own last
	// write, such as a move whose update a change of an owned object beat
	// to the queue: on the API server the move would conflict, on a fake
	// it would be made twice. Wait for the update.
	key := keyFrom(ctx, cached)
	if r.ctrl.awaitOwnWrite(key) {
		return Result{}, nil
	}
	latest, ok := r.ctrl.cache.Get(key)
	if !ok {
		return Result{}, nil
	}
	obj := latest.DeepCopyObject().(T)
	out, mv, res, err := r.advance(ctx, obj, r)
	var refused *refusedError
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
	return r.ctrl.client.InCluster(ClusterFrom(ctx)).PatchFrom(ctx, old, obj)
}

func (r *machineRun[T, S]) writeStatus(ctx context.Context, old, obj T) (T, error) {
	patch, err := statusPatch(old, obj)
	if err != nil || patch == nil {
		return old, err
	}
	return r.ctrl.client.PatchStatus(ctx, KeyOf(old).InCluster(ClusterFrom(ctx)), types.MergePatchType, patch)
}

// memoryWriter writes as the API server would, to memory: Machine.Reconcile's.
type memoryWriter[T Object] struct{}

func (memoryWriter[T]) writeFinalizers(_ context.Context, _, obj T) (T, error) { return obj, nil }

// writeStatus returns old with the status of obj, as the status
// subresource would store it: the writer's merge patch, applied.
func (memoryWriter[T]) writeStatus(_ context.Context, old, obj T) (T, error) {
	_, status, err := splitPatches(old, obj)
	if err != nil || status == nil {
		return old, err
	}
	patch, err := json.Marshal(status)
	if err != nil {
		return old, err
	}
	doc, err := json.Marshal(old)
	if err != nil {
		return old, err
	}
	if doc, err = jsonpatch.MergePatch(doc, patch); err != nil {
		return old, err
	}
	out := binding.New[T]()
	return out, json.Unmarshal(doc, out)
}
