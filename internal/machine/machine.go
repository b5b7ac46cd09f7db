// Package machine checks the declaration of a state machine (its states,
// the moves between them, its condition and its cleanup path) and runs it:
// one reconcile advances an object by at most one move, written through a
// Writer that ctrl backs with its client, or with memory in unit tests.
package machine

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
)

// State is one declared state.
type State struct {
	Step        bool     // it has a step
	To          []string // the states its step may move to
	SpecChanged string   // where a spec change moves an object; "" none
}

// Machine is a declaration, by state name.
type Machine struct {
	Initial   string
	States    map[string]State
	Condition string // the condition's type; "" is checked by the caller
	Finalizer string
	Deleting  string
}

var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// Check returns the states reachable from Deleting (the cleanup path) and
// every problem of m.
func Check(m Machine) (cleanup map[string]bool, problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	declared := func(s string) bool { _, ok := m.States[s]; return ok }
	names := slices.Sorted(maps.Keys(m.States))
	switch {
	case len(m.States) == 0:
		fail("no States")
	case !declared(m.Initial):
		fail("Initial %q is not a declared state", m.Initial)
	}
	for _, s := range names {
		st := m.States[s]
		if !ValidReason(s) {
			fail("state %q: a state's name must be a valid condition reason, such as Provisioning", s)
		}
		if !st.Step && len(st.To) > 0 {
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
	if bad := validation.IsQualifiedName(m.Condition); len(bad) > 0 {
		fail("Condition %q is not a valid condition type: %s", m.Condition, strings.Join(bad, "; "))
	}
	cleanup = map[string]bool{}
	switch {
	case m.Finalizer == "" && m.Deleting == "":
	case m.Finalizer == "" || m.Deleting == "":
		fail("Finalizer and Deleting go together: set both for a cleanup path, or neither")
	case len(apivalidation.ValidateFinalizerName(m.Finalizer, nil)) > 0 || !strings.Contains(m.Finalizer, "/"):
		fail("Finalizer %q: want a qualified name like example.com/cleanup", m.Finalizer)
	case !declared(m.Deleting):
		fail("Deleting %q is not a declared state", m.Deleting)
	default:
		// A state on both paths would count a deleted object there as cleaned up.
		cleanup = reachable(m.States, m.Deleting, false)
		live := reachable(m.States, m.Initial, true)
		for _, s := range names {
			if cleanup[s] && live[s] {
				fail("state %s is on the cleanup path from %s and reachable from %s: the cleanup path must be a path of its own", s, m.Deleting, m.Initial)
			}
		}
		if !slices.ContainsFunc(names, func(s string) bool { return cleanup[s] && !m.States[s].Step }) {
			fail("the cleanup path from %s never reaches a state without a Step, where the finalizer is removed", m.Deleting)
		}
	}
	return cleanup, problems
}

// reachable follows To, and SpecChanged if specChanges is set.
func reachable(states map[string]State, start string, specChanges bool) map[string]bool {
	seen := map[string]bool{}
	for next := []string{start}; len(next) > 0; next = next[1:] {
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

// ValidReason reports whether s is a valid condition reason.
func ValidReason(s string) bool { return conditionReason.MatchString(s) }

// Refused is a move a step asked for that its state does not declare.
type Refused struct {
	from, to string
	allowed  string
}

// Refuse returns the refusal of the move from from to to, where from may
// go to allowed only.
func Refuse[S ~string](from, to S, allowed []S) *Refused {
	e := &Refused{from: string(from), to: string(to), allowed: "nowhere"}
	if len(allowed) > 0 {
		names := make([]string, len(allowed))
		for i, s := range allowed {
			names[i] = string(s)
		}
		e.allowed = strings.Join(names, ", ")
	}
	return e
}

func (e *Refused) Error() string {
	return fmt.Sprintf("%s -> %s is not a declared transition (%s may go to %s)", e.from, e.to, e.from, e.allowed)
}
