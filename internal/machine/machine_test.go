package machine

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	ok := Machine{Initial: "Pending", Condition: "Ready", Finalizer: "example.com/cleanup", Deleting: "Deleting",
		States: map[string]State{
			"Pending":  {Step: true, To: []string{"Ready"}},
			"Ready":    {SpecChanged: "Pending"},
			"Deleting": {Step: true, To: []string{"Gone"}},
			"Gone":     {},
		}}
	cleanup, problems := Check(ok)
	if len(problems) > 0 || !slices.Equal(slices.Sorted(maps.Keys(cleanup)), []string{"Deleting", "Gone"}) {
		t.Fatalf("a sound machine: cleanup %v, problems %q", cleanup, problems)
	}
	for _, tc := range []struct {
		name   string
		change func(m *Machine)
		want   string
	}{
		{"no states", func(m *Machine) { m.States = nil }, "no States"},
		{"initial undeclared", func(m *Machine) { m.Initial = "Nowhere" }, `Initial "Nowhere" is not a declared state`},
		{"bad state name", func(m *Machine) { m.States["not a reason"] = State{} }, "must be a valid condition reason"},
		{"To without a Step", func(m *Machine) { m.States["Ready"] = State{To: []string{"Pending"}} }, "To without a Step"},
		{"To undeclared", func(m *Machine) { m.States["Pending"] = State{Step: true, To: []string{"Lost"}} }, `To names "Lost"`},
		{"SpecChanged undeclared", func(m *Machine) { m.States["Ready"] = State{SpecChanged: "Lost"} }, `SpecChanged names "Lost"`},
		{"bad condition", func(m *Machine) { m.Condition = "not valid!" }, "not a valid condition type"},
		{"finalizer alone", func(m *Machine) { m.Deleting = "" }, "Finalizer and Deleting go together"},
		{"unqualified finalizer", func(m *Machine) { m.Finalizer = "cleanup" }, "want a qualified name"},
		{"cleanup reachable from live", func(m *Machine) { m.States["Ready"] = State{SpecChanged: "Deleting"} }, "must be a path of its own"},
		{"cleanup never ends", func(m *Machine) {
			m.States["Gone"] = State{Step: true, To: []string{"Deleting"}}
		}, "never reaches a state without a Step"},
	} {
		m := ok
		m.States = maps.Clone(ok.States)
		tc.change(&m)
		_, problems := Check(m)
		if !strings.Contains(strings.Join(problems, "; "), tc.want) {
			t.Errorf("%s: problems %q, want one containing %q", tc.name, problems, tc.want)
		}
	}
}
