// Package act says who acts: which replica of a program reconciles which
// objects, and until when. A manager has one [Policy]: every replica, the
// leader of a Lease, or the owner of each object's part of a hash space.
// The manager runs its controllers through Policy.Run, and each controller
// asks it once for the [Share] of its objects: what its cache selects, and
// whether a key is this replica's to reconcile now. Nothing else in the
// manager knows which policy it runs.
package act

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Policy decides who acts. Its methods are safe for concurrent use.
type Policy interface {
	// Run calls lead while this replica may act, with a context that
	// carries the term fencing its writes (leader.Check) and is canceled
	// when the term ends or ctx is done, and returns once ctx is done or
	// the replica may act no more: lead's error, or why its term ended.
	Run(ctx context.Context, lead func(ctx context.Context) error) error
	// Share returns the share of a controller's objects of type t on this
	// replica; nil means all of them.
	Share(t Type) (Share, error)
	// Busy says why the policy is not settled, or returns "".
	Busy() string
	// State is the policy's line in /readyz, or "".
	State() string
}

// Type describes the objects of a controller's cache to a Policy.
type Type struct {
	Name       string // the Go type and resource, for errors and logs
	Namespaced bool
	// Related marks the cache of objects another controller owns (Owns):
	// split only where the split is by namespace and the server selects.
	Related bool
	// Probe lists at most one object with the shard selector sel, and
	// reports whether the server applied it. It returns an error for
	// which apierrors.IsNotFound is true if the resource is not served.
	Probe func(ctx context.Context, sel string) (bool, error)
	// Unlabeled starts watching the type's objects, in the cache's scope,
	// that match req (they carry no valid shard label), for a split by
	// labels, calling poke on every change. Nil for related types.
	Unlabeled func(req labels.Requirement, poke func()) (Labeler, error)
}

// Labeler is a watch of unlabeled objects and what labels them.
type Labeler interface {
	// List returns the objects watched now.
	List() []*metav1.PartialObjectMetadata
	// Patch writes a merge patch to obj.
	Patch(ctx context.Context, obj metav1.Object, patch []byte) error
	// Release stops the watch.
	Release()
}

// Share is the part of a controller's objects this replica holds.
type Share interface {
	// View returns what the cache selects now.
	View() *View
	// Serves reports whether this replica holds obj now.
	Serves(obj metav1.Object) bool
	// HoldsAll reports whether the cache holds every object of namespace
	// ns ("" for all) that its other selectors select.
	HoldsAll(ns string) bool
	// Admit reports whether this replica may reconcile obj now. If so it
	// returns a context that is canceled with ErrMoved when obj's part
	// leaves this replica, and the function to call when the reconcile
	// ends; the part is not given up before that.
	Admit(ctx context.Context, obj metav1.Object) (context.Context, func(), bool)
	// Objects reports how many objects the cache holds, for a gauge.
	Objects(count func() int)
	// Release gives the share back: the controller stopped.
	Release()
}

// View is what a cache selects at one moment.
type View struct {
	Ready bool // the split is known; until then the cache holds nothing
	None  bool // this replica holds none of the objects
	// ShardSelector and Label, when set, are added to the cache's list
	// and watch: a selection by hash, or by the shard label.
	ShardSelector string
	Label         *labels.Requirement
	// Changed is closed when a newer view replaces this one.
	Changed <-chan struct{}
}

// Same reports whether v and o select the same objects.
func (v *View) Same(o *View) bool {
	if v == nil || o == nil {
		return v == o
	}
	return v.Ready == o.Ready && v.None == o.None && v.ShardSelector == o.ShardSelector &&
		(v.Label == nil) == (o.Label == nil) && (v.Label == nil || v.Label.String() == o.Label.String())
}

// Narrow adds the view's selection to opts, a list or watch of a cache
// whose own label selector is sel (nil for none).
func (v *View) Narrow(opts metav1.ListOptions, sel labels.Selector) metav1.ListOptions {
	if v != nil {
		opts.ShardSelector = v.ShardSelector
		if v.Label != nil {
			all := labels.NewSelector()
			if sel != nil {
				reqs, _ := sel.Requirements()
				all = all.Add(reqs...)
			}
			sel = all.Add(*v.Label)
		}
	}
	if sel != nil {
		opts.LabelSelector = sel.String()
	}
	return opts
}

// ErrMoved is the cause of a reconcile's context canceled because its
// object's part is moving to another replica.
var ErrMoved = errors.New("ctrl: the object is moving to another replica")

// Everyone is the Policy of a manager without leader election or
// sharding: every replica acts on every object, always.
type Everyone struct{}

// Run calls lead with ctx.
func (Everyone) Run(ctx context.Context, lead func(context.Context) error) error { return lead(ctx) }
func (Everyone) Share(Type) (Share, error)                                       { return nil, nil }
func (Everyone) Busy() string                                                    { return "" }
func (Everyone) State() string                                                   { return "" }
