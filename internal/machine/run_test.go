package machine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type phase string

type thing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            thingStatus `json:"status,omitempty"`
}

type thingStatus struct {
	Phase              phase              `json:"phase,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func (t *thing) DeepCopyObject() runtime.Object {
	out := *t
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(t.Status.Conditions)
	return &out
}

type terminal struct{ error }

// counting writes to memory, counting the writes of each kind.
type counting struct {
	Memory[*thing]
	finalizers, status int
}

func (w *counting) WriteFinalizers(ctx context.Context, old, obj *thing) (*thing, error) {
	w.finalizers++
	return w.Memory.WriteFinalizers(ctx, old, obj)
}

func (w *counting) WriteStatus(ctx context.Context, old, obj *thing) (*thing, error) {
	w.status++
	return w.Memory.WriteStatus(ctx, old, obj)
}

// spec is a machine with a cleanup path; next is what Provisioning's step returns.
func spec(next Next[phase], err error) Spec[*thing, phase] {
	return Spec[*thing, phase]{
		Initial: "Provisioning",
		States: map[phase]Stage[*thing, phase]{
			"Provisioning": {Step: func(context.Context, *thing) (Next[phase], error) { return next, err }, To: []phase{"Ready"}},
			"Ready":        {Ready: true, SpecChanged: "Provisioning"},
			"Deleting":     {Step: func(context.Context, *thing) (Next[phase], error) { return Next[phase]{To: "Gone"}, nil }, To: []phase{"Gone"}},
			"Gone":         {},
		},
		Phase:              func(t *thing) *phase { return &t.Status.Phase },
		Conditions:         func(t *thing) *[]metav1.Condition { return &t.Status.Conditions },
		ObservedGeneration: func(t *thing) *int64 { return &t.Status.ObservedGeneration },
		Finalizer:          "example.com/cleanup",
		Deleting:           "Deleting",
		Terminal:           func(err error) error { return terminal{err} },
	}
}

func TestAdvance(t *testing.T) {
	entered := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	in := func(p phase, gen, observed int64) *thing {
		obj := &thing{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: gen, Finalizers: []string{"example.com/cleanup"}}}
		obj.Status = thingStatus{Phase: p, ObservedGeneration: observed}
		if p != "" {
			obj.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: string(p), LastTransitionTime: entered}}
		}
		return obj
	}
	deleted := func(obj *thing) *thing {
		obj.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		return obj
	}
	for _, tc := range []struct {
		name                   string
		next                   Next[phase]
		stepErr                error
		obj                    *thing
		wantPhase              phase
		wantReason, wantStatus string // of the condition; "" none checked
		wantMove               bool
		wantAfter              time.Duration
		wantErr                string
		wantTerminal           bool
		wantFinalizers         []string
		wantWrites             [2]int // finalizers, status
	}{
		{name: "a new object gets the finalizer, then enters Initial", obj: &thing{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
			wantPhase: "Provisioning", wantReason: "Created", wantStatus: "False", wantMove: true,
			wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{1, 1}},
		{name: "a step moves", next: Next[phase]{To: "Ready"}, obj: in("Provisioning", 1, 1),
			wantPhase: "Ready", wantReason: "Ready", wantStatus: "True", wantMove: true,
			wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{0, 1}},
		{name: "a step stays and asks to run again", next: Next[phase]{RequeueAfter: time.Minute}, obj: in("Provisioning", 2, 1),
			wantPhase: "Provisioning", wantAfter: time.Minute, wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{0, 1}},
		{name: "a step fails", stepErr: errors.New("bucket quota"), obj: in("Provisioning", 1, 1),
			wantPhase: "Provisioning", wantErr: "state Provisioning: bucket quota", wantFinalizers: []string{"example.com/cleanup"}},
		{name: "an undeclared move is refused", next: Next[phase]{To: "Gone"}, obj: in("Provisioning", 1, 1),
			wantPhase: "Provisioning", wantErr: "Provisioning -> Gone is not a declared transition (Provisioning may go to Ready)",
			wantTerminal: true, wantFinalizers: []string{"example.com/cleanup"}},
		{name: "an invalid reason is refused", next: Next[phase]{To: "Ready", Reason: "not valid"}, obj: in("Provisioning", 1, 1),
			wantPhase: "Provisioning", wantErr: `reason "not valid"`, wantTerminal: true, wantFinalizers: []string{"example.com/cleanup"}},
		{name: "an unknown phase is terminal", obj: in("Lost", 1, 1),
			wantPhase: "Lost", wantErr: `phase "Lost" is not a state`, wantTerminal: true, wantFinalizers: []string{"example.com/cleanup"}},
		{name: "a spec change moves", obj: in("Ready", 2, 1),
			wantPhase: "Provisioning", wantReason: "SpecChanged", wantStatus: "False", wantMove: true,
			wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{0, 1}},
		{name: "a state without a step records the generation", obj: in("Gone", 1, 0),
			wantPhase: "Gone", wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{0, 1}},
		{name: "a deleted object enters the cleanup path", obj: deleted(in("Ready", 1, 1)),
			wantPhase: "Deleting", wantReason: "Deleting", wantStatus: "False", wantMove: true,
			wantFinalizers: []string{"example.com/cleanup"}, wantWrites: [2]int{0, 1}},
		{name: "the end of the cleanup path removes the finalizer", obj: deleted(in("Gone", 1, 1)),
			wantPhase: "Gone", wantWrites: [2]int{1, 0}},
		{name: "a deleted object without the finalizer is left alone", obj: func() *thing {
			obj := deleted(in("Ready", 1, 1))
			obj.Finalizers = nil
			return obj
		}(), wantPhase: "Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Compile(spec(tc.next, tc.stepErr))
			if err != nil {
				t.Fatal(err)
			}
			before := tc.obj.DeepCopyObject().(*thing)
			w := &counting{}
			out, mv, after, err := e.Advance(context.Background(), tc.obj, w)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error: got %v, want one containing %q", err, tc.wantErr)
			}
			if got := errors.As(err, new(terminal)); got != tc.wantTerminal {
				t.Errorf("terminal: got %t, want %t", got, tc.wantTerminal)
			}
			if out.Status.Phase != tc.wantPhase {
				t.Errorf("phase: got %q, want %q", out.Status.Phase, tc.wantPhase)
			}
			if (mv != nil) != tc.wantMove {
				t.Errorf("move: got %+v, want one: %t", mv, tc.wantMove)
			}
			if mv != nil && (mv.From != before.Status.Phase || mv.To != tc.wantPhase) {
				t.Errorf("move: got %s -> %s, want %s -> %s", mv.From, mv.To, before.Status.Phase, tc.wantPhase)
			}
			if mv != nil && before.Status.Phase != "" && !mv.Entered.Equal(entered.Time) {
				t.Errorf("move entered its state: got %s, want %s", mv.Entered, entered)
			}
			if after != tc.wantAfter {
				t.Errorf("run again after: got %s, want %s", after, tc.wantAfter)
			}
			if !slices.Equal(out.Finalizers, tc.wantFinalizers) {
				t.Errorf("finalizers: got %q, want %q", out.Finalizers, tc.wantFinalizers)
			}
			if got := [2]int{w.finalizers, w.status}; got != tc.wantWrites {
				t.Errorf("writes of finalizers and status: got %v, want %v", got, tc.wantWrites)
			}
			if tc.wantReason != "" {
				conds := out.Status.Conditions
				if len(conds) != 1 || conds[0].Reason != tc.wantReason || string(conds[0].Status) != tc.wantStatus ||
					conds[0].ObservedGeneration != out.Generation {
					t.Errorf("conditions: got %+v, want one Ready %s, reason %s, generation %d", conds, tc.wantStatus, tc.wantReason, out.Generation)
				}
			}
			if err == nil && out.Status.ObservedGeneration != out.Generation && w.status > 0 {
				t.Errorf("observedGeneration: got %d, want %d", out.Status.ObservedGeneration, out.Generation)
			}
			if before.Status.Phase != tc.obj.Status.Phase || !slices.Equal(before.Finalizers, tc.obj.Finalizers) {
				t.Errorf("Advance changed its input: got %+v, want %+v", tc.obj, before)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	s := spec(Next[phase]{}, nil)
	s.Phase = nil
	s.States["Ready"] = Stage[*thing, phase]{To: []phase{"Provisioning"}}
	_, err := Compile(s)
	for _, want := range []string{"Phase, Conditions and ObservedGeneration must all be set", "To without a Step"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile: got %v, want an error containing %q", err, want)
		}
	}

	s = spec(Next[phase]{}, nil)
	e, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	s.States["Provisioning"].To[0] = "Gone" // the caller's, not the engine's
	if e.Condition != "Ready" || !slices.Equal(e.Names, []phase{"Deleting", "Gone", "Provisioning", "Ready"}) ||
		e.States["Provisioning"].To[0] != "Ready" {
		t.Errorf("Compile: got condition %q, states %v, Provisioning to %v; want Ready, the four sorted, Ready",
			e.Condition, e.Names, e.States["Provisioning"].To)
	}
}
