// Package shard assigns objects to the live replicas of a sharded program
// by rendezvous hashing, and decides each object's next step so that an
// object moves only after its old owner has let it go.
//
// The invariant: a replica reconciles an object only while the object
// carries the replica's shard label and the replica holds its membership
// Lease. The sharder changes a label from one live replica to another only
// through a drain, which the old owner answers by removing its label in
// the object's own worker, after any reconcile of it has ended; it gives
// the object of a dead replica (its Lease expired, which happens only after
// the replica stopped, since it gives up before its Lease can expire) to
// another at once.
package shard

import (
	"hash/fnv"
	"strings"
)

// Label is the label whose value names the replica that owns an object.
func Label(ring string) string { return "shard.ctrl.dev/" + ring }

// DrainLabel, set on an object, asks its owner to let it go.
func DrainLabel(ring string) string { return "drain.shard.ctrl.dev/" + ring }

// RingLabel marks the membership Leases of a ring.
const RingLabel = "ring.shard.ctrl.dev"

// LeaseName is the name of a replica's membership Lease.
func LeaseName(ring, identity string) string { return ring + "-" + identity }

// SharderLease is the name of the Lease the sharders of a ring elect on.
func SharderLease(ring string) string { return ring + "-sharder" }

// Owner returns the member that owns key: the one with the highest hash of
// member and key (rendezvous hashing), so that a member joining or leaving
// moves only the keys it gains or loses. It returns "" without members.
func Owner(key string, members []string) string {
	var best string
	var top uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(key))
		// FNV alone barely mixes names that differ in a character or two
		// ("r1", "r2"): one member would own half the keys of three.
		if s := mix(h.Sum64()); best == "" || s > top || s == top && m < best {
			best, top = m, s
		}
	}
	return best
}

// mix is MurmurHash3's 64-bit finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Step is what the sharder does to an object.
type Step int

// The steps.
const (
	Keep    Step = iota // nothing to do
	Assign              // set the shard label to the wanted owner, clear any drain
	Drain               // ask the current owner to let the object go
	Wait                // the current owner has been asked; wait for it
	Undrain             // the owner is right after all: clear the drain
)

// Decide returns the step for an object whose shard label is cur (""
// none) and drain label is set or not, given the owner it should have and
// whether cur is a live member.
func Decide(cur string, draining bool, want string, curLive bool) Step {
	switch {
	case want == "":
		return Keep // no live member to give it to
	case cur == want:
		if draining {
			return Undrain
		}
		return Keep
	case cur == "" || !curLive:
		return Assign
	case !draining:
		return Drain
	}
	return Wait
}

// Key is the hashed name of an object: namespace/name.
func Key(namespace, name string) string {
	var b strings.Builder
	b.WriteString(namespace)
	b.WriteByte('/')
	b.WriteString(name)
	return b.String()
}
