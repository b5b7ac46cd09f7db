// Package shard shares the objects of a sharded program among its live
// replicas, and moves them so that no two replicas ever serve one at once.
//
// The objects are points of a 64-bit hash space: the FNV-1a hash of their
// UID, or of their namespace, which is how the API server's shard
// selectors place them. Each replica (a member of the ring) holds a
// membership Lease, and publishes in it, in an annotation, the part of the
// space it claims. Every member computes the same assignment of the space
// to the live members from what they claim ([Assign], which moves a part
// only from a member that holds too much or is gone, to one that holds too
// little) and moves towards its own share:
//
//   - It releases what it should no longer hold: it stops serving that
//     part (no reconcile of its objects runs any more, its caches drop
//     them), and only then publishes its smaller claim.
//   - It claims what it should hold and no live member claims: it
//     publishes the larger claim, then reads every member's Lease with a
//     quorum read, and serves the new part only if no member whose Lease
//     has not expired claims any of it; else it withdraws that part and
//     tries again later.
//
// The invariant: a member serves only what it claimed and found unclaimed
// by every live member after its claim was stored. Two members that claim
// one point both store their claim before they read; the later reader sees
// the other's claim, so at most one of them serves it. A member whose Lease
// expired has stopped acting (its term ended RenewDeadline after its last
// renewal began, before the Lease's duration ran out), so its claims count
// for nothing; the quorum read confirms that it did not renew meanwhile.
//
// Nothing in this is written to the objects themselves. Where the API
// server cannot filter lists and watches by hash (the ShardedListAndWatch
// feature), each object carries a label with its bucket or namespace,
// written once by the member that serves it, and caches select on that.
// The label steers caches only: a reconcile is admitted by the object's
// UID or namespace. A label changed to another valid value (by a user, or
// a GitOps tool applying an old manifest) moves the object into another
// member's cache at once, while the member that serves it may be
// reconciling it; judged by its label, both would act. So the other member
// refuses it, and puts its label back.
package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/leader"
)

// Label is the label that carries an object's shard (its bucket, or its
// namespace) when the API server cannot select by hash.
func Label(ring string) string { return "shard.ctrl.dev/" + ring }

// RingLabel marks the membership Leases of a ring; its value is the ring.
const RingLabel = "ring.shard.ctrl.dev"

// HeldAnnotation on a member's Lease is the part of the hash space it
// claims, as Set.String writes it.
const HeldAnnotation = "shard.ctrl.dev/held"

// GenerationAnnotation on a member's Lease counts its changes of claim,
// so that it knows when one is stored.
const GenerationAnnotation = "shard.ctrl.dev/generation"

// ModeAnnotation on a member's Lease says how it selects its objects, for
// people reading the Lease.
const ModeAnnotation = "shard.ctrl.dev/mode"

// LeaseName is the name of a member's Lease: ring and identity, both DNS
// labels, joined by a dot, which neither can contain, so two names never
// collide.
func LeaseName(ring, identity string) string { return ring + "." + identity }

// LabelPatch is the merge patch that sets an object's shard label, on
// condition that the object is still at resourceVersion rv.
func LabelPatch(rv, label, value string) []byte {
	type meta struct {
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	}
	b, err := json.Marshal(struct {
		Metadata meta `json:"metadata"`
	}{meta{rv, map[string]string{label: value}}})
	if err != nil {
		panic(err) // strings always marshal
	}
	return b
}

// TrimToName keeps of a namespace what the ring needs: its name.
func TrimToName(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: o.Name, ResourceVersion: o.ResourceVersion}}
}

// TrimForLabeler keeps of an unlabeled object what labeling it needs.
func TrimForLabeler(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels}}
}

// Held returns the claim a member's Lease publishes.
func Held(l *coordinationv1.Lease) Set {
	s, err := ParseSet(l.Annotations[HeldAnnotation])
	if err != nil {
		return All // unreadable: assume the worst, that it claims everything
	}
	return s
}

// Ring is one member's view of its ring, and what it does to move towards
// its share. Step is called by one goroutine at a time.
type Ring struct {
	Identity string
	Lease    string // the member's own Lease
	Observer *leader.Observer
	Log      logr.Logger
	// Units returns the units to share, sorted and disjoint.
	Units func() []Span
	// Leases returns the ring's Leases as last watched: a view that may
	// lag, used to decide what to try.
	Leases func() []*coordinationv1.Lease
	// Fenced reads the ring's Leases with a quorum read: what a claim is
	// checked against.
	Fenced func(ctx context.Context) ([]*coordinationv1.Lease, error)
	// Publish makes the member's Lease claim held, and returns once the API
	// server stored it.
	Publish func(ctx context.Context, held Set) error
	// Serve makes the member serve exactly s. When s is smaller than what
	// it served, it returns once nothing of the rest is reconciled any
	// more.
	Serve func(ctx context.Context, s Set) error

	held, serving Set
}

// Held returns what the member claims.
func (r *Ring) Held() Set { return r.held }

// Serving returns what the member serves.
func (r *Ring) Serving() Set { return r.serving }

// Step moves one step towards the member's share of the live members'
// assignment: it releases what it should not hold, then claims what it
// should and nobody live claims. It reports whether the member holds and
// serves exactly its share, and the live members it counted.
func (r *Ring) Step(ctx context.Context) (settled bool, live []string, err error) {
	want, live, others := r.share(r.Leases())
	if !r.held.Minus(want).Empty() || !want.Minus(r.held).Minus(others).Empty() {
		// The watched Leases may lag: a member whose renewals it has not
		// seen yet looks dead, a claim given up looks held. Act on what a
		// quorum read says, so that no part moves between members that
		// stay because one read the ring late.
		fresh, err := r.Fenced(ctx)
		if err != nil {
			return false, live, err
		}
		want, live, others = r.share(fresh)
	}

	if extra := r.held.Minus(want); !extra.Empty() {
		serving := r.serving.Intersect(want)
		if !serving.Equal(r.serving) {
			r.Log.V(1).Info("releasing", "spans", len(r.serving.Minus(serving)), "share", fmt.Sprintf("%.3f", r.serving.Minus(serving).Fraction()))
			if err := r.Serve(ctx, serving); err != nil {
				return false, live, err
			}
			r.serving = serving
		}
		held := r.held.Intersect(want)
		if err := r.Publish(ctx, held); err != nil {
			return false, live, err
		}
		r.held = held
	}

	claim := want.Minus(r.held).Minus(others)
	if !claim.Empty() {
		held := r.held.Union(claim)
		if err := r.Publish(ctx, held); err != nil {
			return false, live, err
		}
		r.held = held
		fenced, err := r.Fenced(ctx)
		if err != nil {
			return false, live, err
		}
		var taken Set
		mine := false
		for _, l := range fenced {
			if l.Name == r.Lease {
				mine = Held(l).Equal(held)
				continue
			}
			if ptr(l.Spec.HolderIdentity) != "" && !r.Observer.Expired(l) {
				taken = taken.Union(Held(l).Intersect(claim))
			}
		}
		if !mine {
			taken = claim // our own claim is not what we stored: trust nothing of it
		}
		if !taken.Empty() {
			r.Log.V(1).Info("a claim met another member's: withdrawing it", "spans", len(taken))
			held = r.held.Minus(taken)
			if err := r.Publish(ctx, held); err != nil {
				return false, live, err
			}
			r.held = held
			claim = claim.Minus(taken)
		}
		if !claim.Empty() {
			serving := r.serving.Union(claim)
			r.Log.V(1).Info("serving", "spans", len(claim), "share", fmt.Sprintf("%.3f", claim.Fraction()))
			if err := r.Serve(ctx, serving); err != nil {
				return false, live, err
			}
			r.serving = serving
		}
	}
	return r.held.Equal(want) && r.serving.Equal(want), live, nil
}

// share returns the member's share of the assignment to the live members
// of leases, those members, and what the others claim.
func (r *Ring) share(leases []*coordinationv1.Lease) (want Set, live []string, others Set) {
	live = []string{r.Identity}
	claims := map[string]Set{r.Identity: r.held}
	for _, l := range leases {
		holder := ptr(l.Spec.HolderIdentity)
		if l.Name == r.Lease || holder == "" || r.Observer.Expired(l) {
			continue
		}
		live = append(live, holder)
		others = others.Union(Held(l))
		claims[holder] = claims[holder].Union(Held(l))
	}
	slices.Sort(live)
	live = slices.Compact(live)
	return Assign(r.Units(), live, claims)[r.Identity], live, others
}

func ptr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
