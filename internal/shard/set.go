package shard

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Hash is the position of a value in the hash space: 64-bit FNV-1a, as
// the API server computes it for a shardRange selector
// (k8s.io/apimachinery/pkg/sharding.HashField).
func Hash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value))
	return h.Sum64()
}

// Span is the closed interval [First, Last] of the hash space.
type Span struct{ First, Last uint64 }

// A Set is a part of the hash space: sorted spans that neither overlap nor
// touch. The zero value is empty; All is the whole space.
type Set []Span

// All is the whole hash space.
var All = Set{{0, math.MaxUint64}}

// Contains reports whether p is in s.
func (s Set) Contains(p uint64) bool {
	i, _ := slices.BinarySearchFunc(s, p, func(sp Span, p uint64) int {
		switch {
		case sp.Last < p:
			return -1
		case sp.First > p:
			return 1
		}
		return 0
	})
	return i < len(s) && s[i].First <= p && p <= s[i].Last
}

// Covers reports whether every point of sp is in s.
func (s Set) Covers(sp Span) bool {
	// Spans never touch, so one of them holds all of sp or none does.
	i, _ := slices.BinarySearchFunc(s, sp.First, func(x Span, p uint64) int { return cmp.Compare(x.Last, p) })
	return i < len(s) && s[i].First <= sp.First && sp.Last <= s[i].Last
}

// Empty reports whether s holds no point.
func (s Set) Empty() bool { return len(s) == 0 }

// Equal reports whether s and o hold the same points.
func (s Set) Equal(o Set) bool { return slices.Equal(s, o) }

// Union returns the points of s or o.
func (s Set) Union(o Set) Set {
	all := append(slices.Clone(s), o...)
	slices.SortFunc(all, byFirst)
	var out Set
	for _, sp := range all {
		if n := len(out); n > 0 && (out[n-1].Last == math.MaxUint64 || sp.First <= out[n-1].Last+1) {
			out[n-1].Last = max(out[n-1].Last, sp.Last)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// Intersect returns the points of both s and o.
func (s Set) Intersect(o Set) Set {
	var out Set
	for i, j := 0, 0; i < len(s) && j < len(o); {
		lo, hi := max(s[i].First, o[j].First), min(s[i].Last, o[j].Last)
		if lo <= hi {
			out = append(out, Span{lo, hi})
		}
		if s[i].Last < o[j].Last {
			i++
		} else {
			j++
		}
	}
	return out
}

// Minus returns the points of s that are not in o.
func (s Set) Minus(o Set) Set {
	var out Set
	j := 0
	for _, sp := range s {
		first := sp.First
		done := false
		for ; j < len(o) && o[j].Last < first; j++ {
		}
		for k := j; k < len(o) && o[k].First <= sp.Last; k++ {
			if o[k].First > first {
				out = append(out, Span{first, o[k].First - 1})
			}
			if o[k].Last >= sp.Last {
				done = true
				break
			}
			first = o[k].Last + 1
		}
		if !done {
			out = append(out, Span{first, sp.Last})
		}
	}
	return out
}

// Fraction returns the part of the hash space s covers, from 0 to 1.
func (s Set) Fraction() float64 {
	var f float64
	for _, sp := range s {
		f += (float64(sp.Last-sp.First) + 1) / (1 << 64)
	}
	return f
}

// String writes s as it is published in a member's Lease: spans of hex
// bounds, "first-last", joined by commas; "" when empty.
func (s Set) String() string {
	parts := make([]string, len(s))
	for i, sp := range s {
		parts[i] = fmt.Sprintf("%016x-%016x", sp.First, sp.Last)
	}
	return strings.Join(parts, ",")
}

// ParseSet reads what String wrote.
func ParseSet(str string) (Set, error) {
	var s Set
	if str == "" {
		return s, nil
	}
	for part := range strings.SplitSeq(str, ",") {
		a, b, ok := strings.Cut(part, "-")
		first, err1 := strconv.ParseUint(a, 16, 64)
		last, err2 := strconv.ParseUint(b, 16, 64)
		if !ok || err1 != nil || err2 != nil || first > last {
			return nil, fmt.Errorf("bad span %q", part)
		}
		s = append(s, Span{first, last})
	}
	return Set{}.Union(s), nil
}

// Selector writes s as a shard selector (ListOptions.ShardSelector) over
// field, such as "object.metadata.uid": a shardRange per span, joined by
// ||, each with an inclusive start and an exclusive end of 16 hex digits,
// or 2^64 (0x10000000000000000) for a span that ends the space. It
// returns "" for the empty set, which the caller must not send: the API
// server reads an absent selector as everything.
func (s Set) Selector(field string) string {
	parts := make([]string, len(s))
	for i, sp := range s {
		end := "0x10000000000000000"
		if sp.Last != math.MaxUint64 {
			end = fmt.Sprintf("0x%016x", sp.Last+1)
		}
		parts[i] = fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", field, sp.First, end)
	}
	return strings.Join(parts, " || ")
}

// Buckets is how many equal parts of the hash space are shared out when
// objects are sharded by UID: enough that three replicas' shares differ by
// a bucket (a sixty-fourth) at most, few enough that a replica's selector
// stays short.
const Buckets = 64

// BucketOf returns the bucket of point p.
func BucketOf(p uint64) int { return int(p >> 58) }

// BucketSpan returns the span of bucket b.
func BucketSpan(b int) Span {
	return Span{uint64(b) << 58, uint64(b)<<58 | (1<<58 - 1)}
}

// BucketUnits returns the Buckets units of UID sharding, in order.
func BucketUnits() []Span {
	units := make([]Span, Buckets)
	for b := range units {
		units[b] = BucketSpan(b)
	}
	return units
}

// PointUnits returns one unit per distinct hash of values, in order: the
// units of sharding by namespace, one per namespace.
func PointUnits(values []string) []Span {
	units := make([]Span, 0, len(values))
	for _, v := range values {
		h := Hash(v)
		units = append(units, Span{h, h})
	}
	slices.SortFunc(units, byFirst)
	return slices.Compact(units)
}

// UnitsServed returns the part of units, from 0 to 1, that serving holds.
func UnitsServed(units []Span, serving Set) float64 {
	if len(units) == 0 {
		return 0
	}
	n := 0
	for _, u := range units {
		if serving.Covers(u) {
			n++
		}
	}
	return float64(n) / float64(len(units))
}

// Assign shares units, sorted and disjoint, among members, moving as few
// as it can from held, what each member claims now: shares differ by a unit
// at most (the number of units over the number of members, rounded down,
// or up for as many members as the division leaves units over: first those
// that hold more than that, then by name), and
//
//   - a member keeps what it holds up to its share, the units it ranks
//     highest for by rendezvous hashing when it holds more;
//   - the units nobody keeps (a dead member's, those a member gave up, new
//     ones) go each to the member that ranks highest for it among those
//     short of their share, in unit order.
//
// So a member joining takes units only from the others, and a member
// leaving gives its units only to the others: no unit moves between two
// members that stay. With held empty this is rendezvous hashing capped at
// the fair share. A unit that several members claim at once (a claim not
// yet withdrawn) is kept by each; the claim protocol settles it.
//
// Each member's units, in order, become one span per run of consecutive
// units it holds, from the first's start to the last's end: runs of buckets
// cover their part of the space exactly; runs of namespaces also cover the
// gaps between them, where no namespace is known yet. Every member with the
// same units, members and claims computes the same result.
func Assign(units []Span, members []string, held map[string]Set) map[string]Set {
	out := make(map[string]Set, len(members))
	if len(members) == 0 {
		return out
	}
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	holds := make(map[string][]int, len(members)) // unit indices, in order
	for _, m := range members {
		if h := held[m]; !h.Empty() {
			for i, u := range units {
				if h.Covers(u) {
					holds[m] = append(holds[m], i)
				}
			}
		}
	}
	// The shares one unit larger go to members that hold more than the
	// fair share, then to the others, each group by name. Nothing finer:
	// an order by how much each holds would change as members give up and
	// take units, and with it, in a member that read the others' claims a
	// moment late, the share of one that stays.
	fair, extra := len(units)/len(members), len(units)%len(members)
	order := slices.Clone(members)
	more := func(m string) int {
		if len(holds[m]) > fair {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(more(b), more(a)) }) // then by name
	target := make(map[string]int, len(members))
	for i, m := range order {
		target[m] = fair
		if i < extra {
			target[m]++
		}
	}
	mine := make(map[string][]int, len(members))
	kept := make([]bool, len(units))
	for _, m := range members {
		keep := holds[m]
		if len(keep) > target[m] {
			keep = slices.Clone(keep)
			slices.SortFunc(keep, func(a, b int) int { return cmp.Compare(rank(m, units[b]), rank(m, units[a])) })
			keep = keep[:target[m]]
			slices.Sort(keep)
		}
		mine[m] = keep
		for _, i := range keep {
			kept[i] = true
		}
	}
	for i, u := range units {
		if kept[i] {
			continue
		}
		best, top, short := "", uint64(0), false
		for _, m := range members {
			s, under := rank(m, u), len(mine[m]) < target[m]
			// Short members first; if claims counted twice left none short,
			// the unit still goes somewhere.
			if best == "" || under && !short || under == short && (s > top || s == top && m < best) {
				best, top, short = m, s, under
			}
		}
		mine[best] = append(mine[best], i)
	}
	for _, m := range members {
		idx := mine[m]
		slices.Sort(idx)
		var s Set
		for k := 0; k < len(idx); {
			j := k
			for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
				j++
			}
			s = append(s, Span{units[idx[k]].First, units[idx[j]].Last})
			k = j + 1
		}
		if s != nil {
			out[m] = Set{}.Union(s)
		}
	}
	return out
}

// rank is how highly member m ranks for unit u in rendezvous hashing.
func rank(m string, u Span) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m))
	h.Write([]byte{0})
	var buf [8]byte
	for k := range buf {
		buf[k] = byte(u.First >> (8 * k))
	}
	h.Write(buf[:])
	// FNV alone barely mixes names that differ in a character or two
	// ("r1", "r2"): one member would rank first for most units.
	return mix(h.Sum64())
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

// byFirst orders spans by where they begin.
func byFirst(a, b Span) int { return cmp.Compare(a.First, b.First) }
