package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl"
)

type bucketNext = ctrl.Next[BucketPhase]

// withStep returns machine with the step of state replaced.
func withStep(machine ctrl.Machine[*Bucket, BucketPhase], state BucketPhase, step func(context.Context, *Bucket) (bucketNext, error)) ctrl.Machine[*Bucket, BucketPhase] {
	states := map[BucketPhase]ctrl.State[*Bucket, BucketPhase]{}
	for s, st := range machine.States {
		states[s] = st
	}
	st := states[state]
	st.Step = step
	states[state] = st
	machine.States = states
	return machine
}

func bucketIn(phase BucketPhase, generation int64) *Bucket {
	b := &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", Generation: generation,
		Finalizers: []string{"example.com/bucket"}}}
	b.Status.Phase = phase
	b.Status.ObservedGeneration = generation
	b.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Earlier",
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second)), ObservedGeneration: generation}}
	return b
}

func deleting(b *Bucket) *Bucket {
	now := metav1.Now()
	b.DeletionTimestamp = &now
	return b
}

// TestMachineStep drives the machine's rules one step at a time with
// Machine.Reconcile: where each object goes, what is written, and what is
// refused.
func TestMachineStep(t *testing.T) {
	failing := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(context.Context, *Bucket) (bucketNext, error) {
			return bucketNext{}, errors.New("cloud unreachable")
		})
	undeclared := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(context.Context, *Bucket) (bucketNext, error) { return bucketNext{To: BucketDeleted}, nil })
	unknown := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(context.Context, *Bucket) (bucketNext, error) { return bucketNext{To: "Exploded"}, nil })
	badReason := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(context.Context, *Bucket) (bucketNext, error) {
			return bucketNext{To: BucketReady, Reason: "not a reason!"}, nil
		})
	specEditor := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(_ context.Context, b *Bucket) (bucketNext, error) {
			b.Spec.Region = "changed" // not written: only the status is
			b.Status.Attempts = 7     // written, though the step stays
			return bucketNext{RequeueAfter: time.Minute}, nil
		})
	noFinalizer := bucketMachine(&cloud{buckets: map[string]bool{}}, 0)
	noFinalizer.Finalizer, noFinalizer.Deleting = "", ""
	delete(noFinalizer.States, BucketDeleting)
	delete(noFinalizer.States, BucketDeleted)

	fresh := &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", Generation: 1}}
	tests := []struct {
		name       string
		machine    ctrl.Machine[*Bucket, BucketPhase]
		in         *Bucket
		phase      BucketPhase // after the step
		reason     string      // of the condition, if it changed
		finalizers int
		requeue    time.Duration
		err        string // the error contains it
		terminal   bool
		check      func(t *testing.T, out *Bucket)
	}{
		{name: "a new object enters Initial, with the finalizer", in: fresh, phase: BucketPending, reason: "Created", finalizers: 1},
		{name: "a step moves on", in: bucketIn(BucketPending, 1), phase: BucketProvisioning, reason: "Accepted", finalizers: 1},
		{name: "a resting state stays", in: bucketIn(BucketReady, 1), phase: BucketReady, finalizers: 1},
		{name: "a spec change sends Ready back", in: func() *Bucket { b := bucketIn(BucketReady, 1); b.Generation = 2; return b }(),
			phase: BucketProvisioning, reason: "SpecChanged", finalizers: 1,
			check: func(t *testing.T, out *Bucket) {
				if out.Status.ObservedGeneration != 2 {
					t.Errorf("observedGeneration: got %d, want 2", out.Status.ObservedGeneration)
				}
			}},
		{name: "a spec change in a state without SpecChanged runs the step", machine: specEditor,
			in:    func() *Bucket { b := bucketIn(BucketProvisioning, 1); b.Generation = 2; return b }(),
			phase: BucketProvisioning, finalizers: 1, requeue: time.Minute,
			check: func(t *testing.T, out *Bucket) {
				c := meta.FindStatusCondition(out.Status.Conditions, "Ready")
				if out.Status.ObservedGeneration != 2 || c.ObservedGeneration != 2 || c.Reason != "Earlier" {
					t.Errorf("got observedGeneration %d, condition %+v; want generation 2 recorded, the condition otherwise unchanged", out.Status.ObservedGeneration, c)
				}
				if out.Spec.Region != "" || out.Status.Attempts != 7 {
					t.Errorf("got region %q, attempts %d; want the spec unwritten and the status written", out.Spec.Region, out.Status.Attempts)
				}
			}},
		{name: "a failing step stays", machine: failing, in: bucketIn(BucketProvisioning, 1), phase: BucketProvisioning, finalizers: 1,
			err: "state Provisioning: cloud unreachable"},
		{name: "a failing step keeps the finalizer added before it", machine: failing,
			in:    func() *Bucket { b := bucketIn(BucketProvisioning, 1); b.Finalizers = nil; return b }(),
			phase: BucketProvisioning, finalizers: 1, err: "cloud unreachable"},
		{name: "an undeclared move is refused", machine: undeclared, in: bucketIn(BucketProvisioning, 1), phase: BucketProvisioning, finalizers: 1,
			err: "Provisioning -> Deleted is not a declared transition (Provisioning may go to Ready, Retrying)", terminal: true},
		{name: "a move to no state is refused", machine: unknown, in: bucketIn(BucketProvisioning, 1), phase: BucketProvisioning, finalizers: 1,
			err: "Provisioning -> Exploded is not a declared transition", terminal: true},
		{name: "an invalid reason is refused", machine: badReason, in: bucketIn(BucketProvisioning, 1), phase: BucketProvisioning, finalizers: 1,
			err: `reason "not a reason!" is not a valid condition reason`, terminal: true},
		{name: "an unknown phase is terminal", in: bucketIn("Lost", 1), phase: "Lost", finalizers: 1,
			err: `phase "Lost" is not a state of the machine`, terminal: true},
		{name: "a deleted object enters the cleanup path", in: deleting(bucketIn(BucketReady, 1)), phase: BucketDeleting, reason: "Deleting", finalizers: 1},
		{name: "a deleted object in an unknown phase is cleaned up too", in: deleting(bucketIn("Lost", 1)), phase: BucketDeleting, reason: "Deleting", finalizers: 1},
		{name: "a deleted object ignores spec changes", in: func() *Bucket { b := deleting(bucketIn(BucketDeleting, 1)); b.Generation = 2; return b }(),
			phase: BucketDeleted, reason: "Deprovisioned", finalizers: 1},
		{name: "the end of the cleanup path removes the finalizer", in: deleting(bucketIn(BucketDeleted, 1)), phase: BucketDeleted, finalizers: 0},
		{name: "a deleted object without the finalizer is left alone",
			in:    func() *Bucket { b := deleting(bucketIn(BucketReady, 1)); b.Finalizers = nil; return b }(),
			phase: BucketReady, finalizers: 0},
		{name: "without a finalizer nothing is added", machine: noFinalizer, in: fresh, phase: BucketPending, reason: "Created", finalizers: 0},
		{name: "without a finalizer a deleted object is left alone", machine: noFinalizer,
			in: func() *Bucket { b := deleting(bucketIn(BucketReady, 1)); b.Finalizers = nil; return b }(), phase: BucketReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			machine := tt.machine
			if machine.States == nil {
				machine = bucketMachine(&cloud{buckets: map[string]bool{}}, 0)
			}
			in := tt.in.DeepCopyObject().(*Bucket)
			before := meta.FindStatusCondition(in.Status.Conditions, "Ready")
			out, res, err := machine.Reconcile(context.Background(), in)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("got error %v, want one that says %q", err, tt.err)
			case tt.err != "" && tt.terminal != strings.HasPrefix(err.Error(), "terminal error: "):
				t.Errorf("got error %v; want terminal: %v", err, tt.terminal)
			}
			if out.Status.Phase != tt.phase {
				t.Errorf("phase: got %q, want %q", out.Status.Phase, tt.phase)
			}
			if len(out.Finalizers) != tt.finalizers {
				t.Errorf("finalizers: got %v, want %d", out.Finalizers, tt.finalizers)
			}
			if res.RequeueAfter != tt.requeue {
				t.Errorf("RequeueAfter: got %v, want %v", res.RequeueAfter, tt.requeue)
			}
			c := meta.FindStatusCondition(out.Status.Conditions, "Ready")
			if tt.reason != "" {
				wantStatus := metav1.ConditionFalse
				if tt.phase == BucketReady {
					wantStatus = metav1.ConditionTrue
				}
				if c == nil || c.Reason != tt.reason || c.Status != wantStatus || c.ObservedGeneration != out.Generation ||
					before != nil && !c.LastTransitionTime.After(before.LastTransitionTime.Time) {
					t.Errorf("condition: got %+v, want reason %s, status %s, generation %d, a new lastTransitionTime", c, tt.reason, wantStatus, out.Generation)
				}
				if out.Status.ObservedGeneration != out.Generation {
					t.Errorf("observedGeneration: got %d, want %d", out.Status.ObservedGeneration, out.Generation)
				}
			} else if before != nil && (c == nil || c.Reason != before.Reason || !c.LastTransitionTime.Equal(&before.LastTransitionTime)) {
				t.Errorf("condition: got %+v, want it unchanged from %+v", c, before)
			}
			if tt.check != nil {
				tt.check(t, out)
			}
			if !equalBuckets(in, tt.in) {
				t.Errorf("Step changed its argument")
			}
		})
	}
}

func equalBuckets(a, b *Bucket) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// TestMachineStepToRest runs a Bucket from creation to Ready with the
// failure and the retry, and from deletion to its end, one step at a time.
func TestMachineStepToRest(t *testing.T) {
	machine := bucketMachine(&cloud{failures: 1, buckets: map[string]bool{}}, 0)
	ctx := context.Background()
	run := func(b *Bucket) (*Bucket, []BucketPhase) {
		var phases []BucketPhase
		for range 20 {
			next, _, err := machine.Reconcile(ctx, b)
			must(t, err)
			if next.Status.Phase == b.Status.Phase && slices.Equal(next.Finalizers, b.Finalizers) {
				return next, phases
			}
			b = next
			phases = append(phases, b.Status.Phase)
		}
		t.Fatalf("no rest after 20 steps: %v", phases)
		return nil, nil
	}
	b, phases := run(&Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", Generation: 1}})
	want := []BucketPhase{BucketPending, BucketProvisioning, BucketRetrying, BucketProvisioning, BucketReady}
	if !slices.Equal(phases, want) || b.Status.Attempts != 2 {
		t.Errorf("got phases %v after %d attempts, want %v after 2", phases, b.Status.Attempts, want)
	}
	b, phases = run(deleting(b))
	if want := []BucketPhase{BucketDeleting, BucketDeleted, BucketDeleted}; !slices.Equal(phases, want) || len(b.Finalizers) != 0 {
		t.Errorf("got phases %v and finalizers %v after the deletion, want %v and none", phases, b.Finalizers, want)
	}
}

// TestMachineDeclaration checks that an incomplete or inconsistent machine
// is an error when wiring, saying what is wrong.
func TestMachineDeclaration(t *testing.T) {
	good := func() ctrl.Machine[*Bucket, BucketPhase] { return bucketMachine(&cloud{}, 0) }
	change := func(f func(m *ctrl.Machine[*Bucket, BucketPhase])) ctrl.Machine[*Bucket, BucketPhase] {
		m := good()
		f(&m)
		return m
	}
	state := func(m *ctrl.Machine[*Bucket, BucketPhase], s BucketPhase, f func(*ctrl.State[*Bucket, BucketPhase])) {
		st := m.States[s]
		f(&st)
		m.States[s] = st
	}
	tests := []struct {
		name    string
		machine ctrl.Machine[*Bucket, BucketPhase]
		want    string
	}{
		{"no accessors", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) { m.Conditions = nil }), "Phase, Conditions and ObservedGeneration must all be set"},
		{"no states", ctrl.Machine[*Bucket, BucketPhase]{Phase: good().Phase, Conditions: good().Conditions, ObservedGeneration: good().ObservedGeneration}, "no States"},
		{"undeclared initial", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) { m.Initial = "Waiting" }), `Initial "Waiting" is not a declared state`},
		{"undeclared target", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketPending, func(s *ctrl.State[*Bucket, BucketPhase]) { s.To = append(s.To, "Nowhere") })
		}), `state Pending: To names "Nowhere", which is not a declared state`},
		{"undeclared spec change target", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketReady, func(s *ctrl.State[*Bucket, BucketPhase]) { s.SpecChanged = "Nowhere" })
		}), `state Ready: SpecChanged names "Nowhere"`},
		{"To without a step", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketReady, func(s *ctrl.State[*Bucket, BucketPhase]) { s.To = []BucketPhase{BucketPending} })
		}), "state Ready: To without a Step"},
		{"a name that is no reason", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			m.States["in progress"] = ctrl.State[*Bucket, BucketPhase]{}
		}), `state "in progress": a state's name must be a valid condition reason`},
		{"bad condition type", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) { m.Condition = "not ok" }), `Condition "not ok" is not a valid condition type`},
		{"finalizer without Deleting", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) { m.Deleting = "" }), "Finalizer and Deleting go together"},
		{"unqualified finalizer", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) { m.Finalizer = "cleanup" }), `Finalizer "cleanup": want a qualified name`},
		{"cleanup path back to the start", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketDeleting, func(s *ctrl.State[*Bucket, BucketPhase]) { s.To = append(s.To, BucketPending) })
		}), "state Pending is on the cleanup path from Deleting and reachable from Pending"},
		{"cleanup path through a live state", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketDeleting, func(s *ctrl.State[*Bucket, BucketPhase]) { s.To = append(s.To, BucketReady) })
		}), "state Ready is on the cleanup path from Deleting and reachable from Pending"},
		{"cleanup path without an end", change(func(m *ctrl.Machine[*Bucket, BucketPhase]) {
			state(m, BucketDeleting, func(s *ctrl.State[*Bucket, BucketPhase]) { s.To = nil })
		}), "the cleanup path from Deleting never reaches a state without a Step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: newBucketFake()})
			_, err := ctrl.NewMachine(mgr, "bucket", tt.machine, ctrl.ControllerOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), `ctrl: NewMachine "bucket": `) {
				t.Errorf("NewMachine: got %v, want an error that says %q", err, tt.want)
			}
			if _, _, err := tt.machine.Reconcile(context.Background(), &Bucket{}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Step: got %v, want an error that says %q", err, tt.want)
			}
		})
	}

	t.Run("no Events", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeDynamic: newBucketFake()})
		if _, err := ctrl.NewMachine(mgr, "bucket", good(), ctrl.ControllerOptions{}); err == nil {
			t.Errorf("NewMachine without a client for Events: got no error")
		}
	})
	t.Run("no status subresource", func(t *testing.T) {
		mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: newBucketFake()})
		m := ctrl.Machine[*corev1.ConfigMap, BucketPhase]{
			Initial:            "Pending",
			States:             map[BucketPhase]ctrl.State[*corev1.ConfigMap, BucketPhase]{"Pending": {}},
			Phase:              func(*corev1.ConfigMap) *BucketPhase { return new(BucketPhase) },
			Conditions:         func(*corev1.ConfigMap) *[]metav1.Condition { return new([]metav1.Condition) },
			ObservedGeneration: func(*corev1.ConfigMap) *int64 { return new(int64) },
		}
		if _, err := ctrl.NewMachine(mgr, "cm", m, ctrl.ControllerOptions{}); err == nil || !strings.Contains(err.Error(), "has no status subresource") {
			t.Errorf("got %v, want an error about the status subresource", err)
		}
	})
}

// TestMachineMetrics runs two Buckets to Ready, one through a failure, and
// reads the machine's metrics: objects per state, moves, time in a state.
func TestMachineMetrics(t *testing.T) {
	mgr := newManager(t, ctrl.Options{FakeClientset: fake.NewClientset(), FakeDynamic: newBucketFake()})
	_, err := ctrl.NewMachine(mgr, "bucket", bucketMachine(&cloud{failures: 1, buckets: map[string]bool{}}, 0), ctrl.ControllerOptions{})
	must(t, err)
	client, err := ctrl.NewClient[*Bucket](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	for _, name := range []string{"a", "b"} {
		_, err := client.Create(ctx, &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		must(t, err)
	}
	waitIdle(t, mgr)
	reg := mgr.Registry()
	for series, want := range map[string]float64{
		`ctrl_machine_objects{machine="bucket",state="Ready"}`:                               2,
		`ctrl_machine_objects{machine="bucket",state="Pending"}`:                             0,
		`ctrl_machine_transitions_total{from="",machine="bucket",to="Pending"}`:              2,
		`ctrl_machine_transitions_total{from="Pending",machine="bucket",to="Provisioning"}`:  2,
		`ctrl_machine_transitions_total{from="Provisioning",machine="bucket",to="Retrying"}`: 1,
		`ctrl_machine_transitions_total{from="Retrying",machine="bucket",to="Provisioning"}`: 1,
		`ctrl_machine_transitions_total{from="Provisioning",machine="bucket",to="Ready"}`:    2,
		`ctrl_machine_transitions_total{from="Deleting",machine="bucket",to="Deleted"}`:      0,
		`ctrl_machine_state_duration_seconds{machine="bucket",state="Pending"}`:              2,
		`ctrl_machine_state_duration_seconds{machine="bucket",state="Provisioning"}`:         3,
		`controller_runtime_reconcile_total{controller="bucket",result="error"}`:             0,
		`controller_runtime_terminal_reconcile_errors_total{controller="bucket"}`:            0,
	} {
		if got := metricValue(t, reg, series); got != want {
			t.Errorf("%s: got %v, want %v", series, got, want)
		}
	}
}

// TestMachineConflict makes the first status write of a move fail with a
// conflict, as the API server answers when the object changed since the
// step read it: the step runs again on fresh state and the move is written,
// and reported, once.
func TestMachineConflict(t *testing.T) {
	clientset := fake.NewClientset()
	dyn := newBucketFake()
	var mu sync.Mutex
	conflicts := 0
	dyn.PrependReactor("patch", "buckets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if a.GetSubresource() == "status" && strings.Contains(string(a.(clienttesting.PatchAction).GetPatch()), `"Provisioning"`) && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "example.com", Resource: "buckets"}, "b", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	mgr := newManager(t, ctrl.Options{FakeClientset: clientset, FakeDynamic: dyn})
	var steps sync.Map
	machine := bucketMachine(&cloud{buckets: map[string]bool{}}, 0)
	pending := machine.States[BucketPending].Step
	machine = withStep(machine, BucketPending, func(ctx context.Context, b *Bucket) (bucketNext, error) {
		n, _ := steps.LoadOrStore("pending", new(int))
		*n.(*int)++
		return pending(ctx, b)
	})
	_, err := ctrl.NewMachine(mgr, "bucket", machine, ctrl.ControllerOptions{})
	must(t, err)
	client, err := ctrl.NewClient[*Bucket](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	_, err = client.Create(ctx, &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}, Spec: BucketSpec{Region: "r"}})
	must(t, err)
	waitIdle(t, mgr)
	b, err := client.Get(ctx, ctrl.Key{Namespace: "default", Name: "b"})
	must(t, err)
	n, _ := steps.Load("pending")
	if b.Status.Phase != BucketReady || conflicts != 1 || *n.(*int) != 2 {
		t.Errorf("got phase %s after %d conflicts and %d runs of Pending's step; want Ready after 1 conflict and 2 runs", b.Status.Phase, conflicts, *n.(*int))
	}
	var moves []string
	for _, e := range waitForEvents(clientset, "default", 3) {
		moves = append(moves, fmt.Sprintf("%s x%d", e.Message, e.Count))
	}
	want := []string{"Pending: new object x1", "Pending -> Provisioning: region r x1", "Provisioning -> Ready: bucket b created x1"}
	if !slices.Equal(moves, want) {
		t.Errorf("got Events %q, want %q", moves, want)
	}
}

// TestMachineRefusedOnFakes checks what an undeclared move leaves behind:
// the object where it was, a Warning Event that names both states, and a
// terminal error that is not retried.
func TestMachineRefusedOnFakes(t *testing.T) {
	clientset := fake.NewClientset()
	mgr := newManager(t, ctrl.Options{FakeClientset: clientset, FakeDynamic: newBucketFake()})
	var calls sync.Map
	machine := withStep(bucketMachine(&cloud{buckets: map[string]bool{}}, 0), BucketProvisioning,
		func(context.Context, *Bucket) (bucketNext, error) {
			n, _ := calls.LoadOrStore("n", new(int))
			*n.(*int)++
			return bucketNext{To: BucketDeleted, Reason: "Shortcut"}, nil
		})
	_, err := ctrl.NewMachine(mgr, "bucket", machine, ctrl.ControllerOptions{})
	must(t, err)
	client, err := ctrl.NewClient[*Bucket](mgr, ctrl.ClientOptions{})
	must(t, err)
	ctx := start(t, mgr)
	_, err = client.Create(ctx, &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}})
	must(t, err)
	waitIdle(t, mgr)
	b, err := client.Get(ctx, ctrl.Key{Namespace: "default", Name: "b"})
	must(t, err)
	n, _ := calls.Load("n")
	if b.Status.Phase != BucketProvisioning || *n.(*int) != 1 {
		t.Errorf("got phase %s after %d runs of the step, want Provisioning after 1", b.Status.Phase, *n.(*int))
	}
	if got := metricValue(t, mgr.Registry(), `controller_runtime_terminal_reconcile_errors_total{controller="bucket"}`); got != 1 {
		t.Errorf("terminal errors: got %v, want 1", got)
	}
	events := waitForEvents(clientset, "default", 3)
	last := events[len(events)-1]
	if last.Type != corev1.EventTypeWarning || last.Reason != "TransitionRefused" ||
		last.Message != "Provisioning -> Deleted is not a declared transition (Provisioning may go to Ready, Retrying)" {
		t.Errorf("got last Event %s %s %q, want a Warning TransitionRefused naming both states", last.Type, last.Reason, last.Message)
	}
}
