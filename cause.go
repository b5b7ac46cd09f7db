package ctrl

import (
	"slices"
	"strconv"
	"strings"
)

// Trigger says what queued a key: a watch's change, a timer or a call. The
// set is fixed, so it labels metrics; it is no Event's or condition's reason.
type Trigger string

// The triggers that queue a key.
const (
	TriggerCreated  Trigger = "created"  // the reconciled object appeared
	TriggerUpdated  Trigger = "updated"  // the reconciled object changed
	TriggerDeleted  Trigger = "deleted"  // the reconciled object is gone, or left the cache's selector
	TriggerOwned    Trigger = "owned"    // an object it controls changed ([Owns])
	TriggerMapped   Trigger = "mapped"   // a watched object mapped to it changed ([Watches])
	TriggerListed   Trigger = "listed"   // a list: the controller started, took over, or relisted
	TriggerResync   Trigger = "resync"   // ControllerOptions.ResyncPeriod passed
	TriggerRequeue  Trigger = "requeue"  // Result.RequeueAfter passed
	TriggerRetry    Trigger = "retry"    // an earlier reconcile failed
	TriggerEnqueued Trigger = "enqueued" // [Controller.Enqueue]
	TriggerJoined   Trigger = "joined"   // a member cluster of a watched fleet cache joined and was listed
)

// reasons lists every Trigger, for metrics that are present at zero.
var reasons = []Trigger{TriggerCreated, TriggerUpdated, TriggerDeleted, TriggerOwned, TriggerMapped,
	TriggerListed, TriggerResync, TriggerRequeue, TriggerRetry, TriggerEnqueued, TriggerJoined}

// Cause is one trigger that queued a key, and the object whose change it was.
type Cause struct {
	Trigger Trigger
	// Kind and Object name the object that changed, reconciled, owned or
	// watched: both empty for requeues, retries, resyncs and enqueues, Object for a list.
	Kind   string
	Object Key
}

// String returns "trigger", "trigger Kind", or "trigger Kind namespace/name".
func (c Cause) String() string {
	s := string(c.Trigger)
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

	reasons uint32 // a bit per trigger of every cause, kept or not
}

// maxCauses bounds the causes kept per queued key.
const maxCauses = 4

func (cs *Causes) add(c Cause) {
	cs.Total++
	if i := slices.Index(reasons, c.Trigger); i >= 0 {
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
