package ctrl

import (
	"slices"
	"strconv"
	"strings"
)

// Reason says what queued a key: which watch saw a change, or which timer
// or call asked for the key. The set is fixed, so it can label metrics.
type Reason string

// The reasons a key is queued.
const (
	ReasonCreated   Reason = "created"   // the reconciled object appeared
	ReasonUpdated   Reason = "updated"   // the reconciled object changed
	ReasonDeleted   Reason = "deleted"   // the reconciled object is gone, or left the cache's selector
	ReasonOwned     Reason = "owned"     // an object it controls changed ([Owns])
	ReasonMapped    Reason = "mapped"    // a watched object mapped to it changed ([Watches])
	ReasonListed    Reason = "listed"    // a list: the controller started, took over, or relisted
	ReasonResync    Reason = "resync"    // ControllerOptions.ResyncPeriod passed
	ReasonRequeue   Reason = "requeue"   // Result.RequeueAfter passed
	ReasonRetry     Reason = "retry"     // an earlier reconcile failed
	ReasonTriggered Reason = "triggered" // [Controller.Enqueue]
	ReasonJoined    Reason = "joined"    // a member cluster of a watched fleet cache joined and was listed
)

// reasons lists every Reason, for metrics that are present at zero.
var reasons = []Reason{ReasonCreated, ReasonUpdated, ReasonDeleted, ReasonOwned, ReasonMapped,
	ReasonListed, ReasonResync, ReasonRequeue, ReasonRetry, ReasonTriggered, ReasonJoined}

// Cause is one reason a key was queued, and the object whose change it was.
type Cause struct {
	Reason Reason
	// Kind and Object name the object that changed, the reconciled one or
	// an owned or watched one; both are empty for requeues, retries,
	// resyncs and triggers, Object for a list of owned or watched objects.
	Kind   string
	Object Key
}

// String returns "reason", "reason Kind", or "reason Kind namespace/name".
func (c Cause) String() string {
	s := string(c.Reason)
	if c.Kind != "" {
		s += " " + c.Kind
	}
	switch {
	case c.Object.Name != "":
		s += " " + c.Object.String()
	case c.Object.Cluster != "":
		s += " cluster " + c.Object.Cluster
	}
	return s
}

// Causes say why a reconcile runs: the first causes queued for its key
// since its previous reconcile began, in order, and how many (Stingy).
type Causes struct {
	// First holds the first causes, at most maxCauses of them.
	First []Cause
	// Total counts every cause, including those not kept in First.
	Total int

	reasons uint32 // a bit per reason of every cause, kept or not
}

// maxCauses bounds the causes kept per queued key.
const maxCauses = 4

func (cs *Causes) add(c Cause) {
	cs.Total++
	if i := slices.Index(reasons, c.Reason); i >= 0 {
		cs.reasons |= 1 << i
	}
	if len(cs.First) < maxCauses {
		cs.First = append(cs.First, c)
	}
}

func (cs *Causes) merge(other *Causes) {
	for _, c := range other.First {
		if len(cs.First) < maxCauses {
			cs.First = append(cs.First, c)
		}
	}
	cs.Total += other.Total
	cs.reasons |= other.reasons
}

// String lists the causes for a log line: "updated ConfigMap ns/a; retry
// (+3 more)".
func (cs Causes) String() string {
	var b strings.Builder
	for i, c := range cs.First {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.String())
	}
	if more := cs.Total - len(cs.First); more > 0 {
		b.WriteString(" (+" + strconv.Itoa(more) + " more)")
	}
	return b.String()
}
