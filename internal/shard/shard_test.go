package shard

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/leader"
)

// TestSetOps checks the set operations against a model: sets of small
// points, where every point can be enumerated.
func TestSetOps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func() (Set, map[uint64]bool) {
		var s Set
		for range r.IntN(4) {
			a := uint64(r.IntN(40))
			s = append(s, Span{a, a + uint64(r.IntN(6))})
		}
		s = Set{}.Union(s)
		pts := map[uint64]bool{}
		for _, sp := range s {
			for p := sp.First; p <= sp.Last; p++ {
				pts[p] = true
			}
		}
		return s, pts
	}
	for range 2000 {
		a, pa := random()
		b, pb := random()
		u, i, m := a.Union(b), a.Intersect(b), a.Minus(b)
		for p := uint64(0); p < 50; p++ {
			if got, want := u.Contains(p), pa[p] || pb[p]; got != want {
				t.Fatalf("%v ∪ %v = %v: %d: got %t", a, b, u, p, got)
			}
			if got, want := i.Contains(p), pa[p] && pb[p]; got != want {
				t.Fatalf("%v ∩ %v = %v: %d: got %t", a, b, i, p, got)
			}
			if got, want := m.Contains(p), pa[p] && !pb[p]; got != want {
				t.Fatalf("%v - %v = %v: %d: got %t", a, b, m, p, got)
			}
		}
		for _, s := range []Set{u, i, m} {
			for k := 1; k < len(s); k++ {
				if s[k].First <= s[k-1].Last+1 {
					t.Fatalf("%v: spans overlap or touch", s)
				}
			}
			back, err := ParseSet(s.String())
			if err != nil || !back.Equal(s) {
				t.Fatalf("ParseSet(%q) = %v, %v", s.String(), back, err)
			}
		}
	}
	if !All.Minus(Set{{0, 10}}).Union(Set{{0, 10}}).Equal(All) || All.Fraction() != 1 {
		t.Error("the whole space does not round-trip")
	}
	if All.Minus(Set{{math.MaxUint64, math.MaxUint64}}).Contains(math.MaxUint64) {
		t.Error("the last point survived its removal")
	}
}

// TestSelectorMatchesServer: the selector a Set writes selects, on the API
// server's side (apimachinery's sharding.Selector, which the server's
// parser builds), exactly the values whose Hash is in the set.
func TestSelectorMatchesServer(t *testing.T) {
	sets := []Set{All, {BucketSpan(0)}, {BucketSpan(3), BucketSpan(63)}, Assign(BucketUnits(), []string{"a", "b", "c"}, nil)["b"]}
	for _, s := range sets {
		sel := serverSelector(t, s.Selector("object.metadata.uid"))
		for i := range 2000 {
			uid := fmt.Sprintf("%08x-0000-4000-8000-%012d", i*7919, i)
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: typesUID(uid)}}
			got, err := sel.Matches(obj)
			if err != nil {
				t.Fatal(err)
			}
			if want := s.Contains(Hash(uid)); got != want {
				t.Fatalf("%s: uid %s: server matches %t, set contains %t", s.Selector("object.metadata.uid"), uid, got, want)
			}
		}
	}
}

// serverSelector parses a selector the way the API server's parser
// (k8s.io/apiserver/pkg/sharding.Parse) does for the forms Selector
// writes, and builds apimachinery's Selector from it.
func serverSelector(t *testing.T, s string) sharding.Selector {
	var reqs []sharding.ShardRangeRequirement
	for part := range strings.SplitSeq(s, " || ") {
		args, ok := strings.CutPrefix(part, "shardRange(")
		args, ok2 := strings.CutSuffix(args, ")")
		f := strings.Split(args, ", ")
		if !ok || !ok2 || len(f) != 3 {
			t.Fatalf("%q is not a shardRange", part)
		}
		start, end := strings.Trim(f[1], "'"), strings.Trim(f[2], "'")
		if len(start) != 18 || (len(end) != 18 && end != "0x10000000000000000") {
			t.Fatalf("%q: bounds must have 16 hex digits: %q %q", part, start, end)
		}
		reqs = append(reqs, sharding.ShardRangeRequirement{Key: f[0], Start: start, End: end})
	}
	return sharding.NewSelector(reqs...)
}

func TestAssign(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7} {
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf("r%d", i+1))
		}
		shares := Assign(BucketUnits(), members, nil)
		var all Set
		for _, m := range members {
			s := shares[m]
			if !all.Intersect(s).Empty() {
				t.Fatalf("%d members: %s's share overlaps another's", n, m)
			}
			all = all.Union(s)
			fair := float64(Buckets/n) / Buckets
			if f := s.Fraction(); f < fair-1e-9 || f > fair+1.0/Buckets+1e-9 {
				t.Errorf("%d members: %s holds %.3f of the space, want %.3f to %.3f", n, m, f, fair, fair+1.0/Buckets)
			}
		}
		if !all.Equal(All) {
			t.Errorf("%d members: shares cover %v, want all", n, all)
		}
	}
	// Namespaces whose names differ in the last character share the
	// top bits of their FNV hashes: their units are points, and runs of
	// them cover the gaps between.
	var nss []string
	for i := range 30 {
		nss = append(nss, fmt.Sprintf("team-%02d", i))
	}
	shares := Assign(PointUnits(nss), []string{"a", "b", "c"}, nil)
	for _, m := range []string{"a", "b", "c"} {
		n := 0
		for _, ns := range nss {
			if shares[m].Contains(Hash(ns)) {
				n++
			}
		}
		if n != 10 {
			t.Errorf("%s serves %d of 30 namespaces, want 10", m, n)
		}
	}
	if len(Assign(BucketUnits(), nil, nil)) != 0 {
		t.Error("shares without members")
	}
}

// TestAssignMoves: from any balanced assignment, a member joining takes
// units only from the others, and a member leaving gives its units only to
// the others; no unit moves between two members that stay, and shares still
// differ by a unit at most.
func TestAssignMoves(t *testing.T) {
	var nss []string
	for i := range 200 {
		nss = append(nss, fmt.Sprintf("ns-%d", i))
	}
	for _, units := range [][]Span{BucketUnits(), PointUnits(nss)} {
		// Start from one member and let members join one by one to 8, then
		// leave one by one, each time from the assignment before.
		held := Assign(units, []string{"r1"}, nil)
		members := []string{"r1"}
		step := func(next []string, why string) {
			t.Helper()
			after := Assign(units, next, held)
			counts := map[string]int{}
			for i, u := range units {
				from, to := "", ""
				for _, m := range members {
					if held[m].Covers(u) {
						from = m
					}
				}
				for _, m := range next {
					if after[m].Covers(u) {
						if to != "" {
							t.Fatalf("%s: unit %d goes to %s and %s", why, i, to, m)
						}
						to = m
					}
				}
				if to == "" {
					t.Fatalf("%s: unit %d goes to nobody", why, i)
				}
				counts[to]++
				if from != to && slices.Contains(members, to) && slices.Contains(next, from) {
					t.Errorf("%s: unit %d moved from %s to %s, who both stay", why, i, from, to)
				}
			}
			lo, hi := len(units), 0
			for _, m := range next {
				lo, hi = min(lo, counts[m]), max(hi, counts[m])
			}
			if hi-lo > 1 {
				t.Errorf("%s: shares of %d to %d units", why, lo, hi)
			}
			held, members = after, next
		}
		for n := 2; n <= 8; n++ {
			next := append(slices.Clone(members), fmt.Sprintf("r%d", n))
			step(next, fmt.Sprintf("%d units, r%d joining", len(units), n))
		}
		for _, gone := range []string{"r3", "r8", "r1", "r5", "r2", "r7", "r4"} {
			next := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == gone })
			step(next, fmt.Sprintf("%d units, %s leaving %v", len(units), gone, members))
		}
		// The same assignment again moves nothing.
		if again := Assign(units, members, held); !again[members[0]].Equal(held[members[0]]) {
			t.Errorf("%d units: assigning again moved units", len(units))
		}
	}
}

func TestLabelPatch(t *testing.T) {
	got := string(LabelPatch("42", `shard.ctrl.dev/ring`, `7"`))
	want := `{"metadata":{"resourceVersion":"42","labels":{"shard.ctrl.dev/ring":"7\""}}}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// ring is a fake API server's Leases, shared by the members of a test.
type ring struct {
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease
	rv     int
	now    time.Time
	// history holds the Leases after each write, for views that lag.
	history [][]*coordinationv1.Lease
}

func (f *ring) put(l *coordinationv1.Lease) {
	f.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(f.rv)
	f.leases[l.Name] = l
	f.history = append(f.history, slices.Collect(maps.Values(f.leases)))
}

func (f *ring) list() []*coordinationv1.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*coordinationv1.Lease
	for _, l := range f.leases {
		out = append(out, l.DeepCopy())
	}
	return out
}

type clock struct{ f *ring }

func (c clock) Now() time.Time {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.now
}
func (clock) AfterFunc(time.Duration, func()) func() bool { panic("unused") }

// member joins f as identity: its Lease is renewed now.
func (f *ring) member(id string, serving map[string]Set) *Ring {
	f.mu.Lock()
	rt := metav1.NewMicroTime(f.now)
	f.put(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "r." + id},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &rt, LeaseDurationSeconds: new(int32(5))}})
	f.mu.Unlock()
	return &Ring{Identity: id, Lease: "r." + id, Observer: &leader.Observer{Clock: clock{f}}, Log: logr.Discard(),
		Units:  BucketUnits,
		Leases: f.list,
		Fenced: func(context.Context) ([]*coordinationv1.Lease, error) { return f.list(), nil },
		Publish: func(_ context.Context, held Set) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			l := f.leases["r."+id]
			l.Annotations = map[string]string{HeldAnnotation: held.String()}
			f.put(l)
			return nil
		},
		Serve: func(_ context.Context, s Set) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			serving[id] = s
			return nil
		},
	}
}

func (f *ring) renew(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases["r."+id]
	rt := metav1.NewMicroTime(f.now)
	l.Spec.RenewTime = &rt
	f.put(l)
}

// TestRingMoves runs members through joins and a death, stepping them in
// random orders, and checks after every step that no point is served by
// two members whose Leases have not expired, and that the members settle
// on shares that cover the space.
// With lag, each member reads the Leases as they were some writes ago, as
// a member whose watch is behind does: each read moves a random way
// towards the present, never back.
func TestRingMoves(t *testing.T) {
	for seed := range uint64(50) {
		for _, lag := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d,lag=%t", seed, lag), func(t *testing.T) { ringMoves(t, seed, lag) })
		}
	}
}

func ringMoves(t *testing.T, seed uint64, lag bool) {
	f := &ring{leases: map[string]*coordinationv1.Lease{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	serving := map[string]Set{}
	members := map[string]*Ring{}
	r := rand.New(rand.NewPCG(seed, 4))
	join := func(id string) {
		m := f.member(id, serving)
		if lag {
			seen := 0
			m.Leases = func() []*coordinationv1.Lease {
				f.mu.Lock()
				defer f.mu.Unlock()
				seen += r.IntN(len(f.history) - seen)
				var out []*coordinationv1.Lease
				for _, l := range f.history[seen] {
					out = append(out, l.DeepCopy())
				}
				return out
			}
		}
		members[id] = m
	}
	check := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		var seen Set
		for id, s := range serving {
			l := f.leases["r."+id]
			if l == nil || f.now.Sub(l.Spec.RenewTime.Time) >= 5*time.Second {
				continue // dead
			}
			if !seen.Intersect(s).Empty() {
				t.Fatalf("%s serves what another live member serves", id)
			}
			seen = seen.Union(s)
		}
	}
	settle := func(ids ...string) {
		for round := range 200 {
			// Settled: every member says so in a round that changed no
			// claim, since a member's share follows the others' claims.
			f.mu.Lock()
			rv := f.rv
			f.mu.Unlock()
			all := true
			for _, i := range r.Perm(len(ids)) {
				ok, _, err := members[ids[i]].Step(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				all = all && ok
				check()
			}
			f.mu.Lock()
			all = all && f.rv == rv
			f.mu.Unlock()
			if all {
				var covered Set
				for _, id := range ids {
					covered = covered.Union(serving[id])
				}
				if !covered.Equal(All) {
					t.Fatalf("settled on %v, which does not cover the space", covered)
				}
				return
			}
			_ = round
		}
		t.Fatalf("%v did not settle", ids)
	}
	snapshot := func() map[string]Set {
		f.mu.Lock()
		defer f.mu.Unlock()
		return maps.Clone(serving)
	}
	// stayed checks that nothing moved between two of ids from before to
	// now, and that shares differ by a bucket at most.
	stayed := func(before map[string]Set, why string, ids ...string) {
		t.Helper()
		after := snapshot()
		lo, hi := 1.0, 0.0
		for _, x := range ids {
			for _, y := range ids {
				if moved := before[x].Intersect(after[y]); x != y && !moved.Empty() {
					t.Errorf("%s: %.3f of the space moved from %s to %s, who both stay", why, moved.Fraction(), x, y)
				}
			}
			lo, hi = min(lo, after[x].Fraction()), max(hi, after[x].Fraction())
		}
		if hi-lo > 1.0/Buckets+1e-9 {
			t.Errorf("%s: shares of %.3f to %.3f of the space", why, lo, hi)
		}
	}
	join("a")
	join("b")
	settle("a", "b")
	before := snapshot()
	join("c")
	settle("a", "b", "c")
	stayed(before, "c joining", "a", "b")
	before = snapshot()
	join("d")
	settle("a", "b", "c", "d")
	stayed(before, "d joining", "a", "b", "c")
	before = snapshot()
	// b dies: nobody takes its share until its Lease expires.
	f.mu.Lock()
	f.now = f.now.Add(3 * time.Second)
	f.mu.Unlock()
	for _, id := range []string{"a", "c", "d"} {
		f.renew(id)
	}
	for _, id := range []string{"a", "c", "d"} {
		if _, _, err := members[id].Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !members[id].Serving().Intersect(serving["b"]).Empty() {
			t.Fatalf("%s took b's share before b's Lease expired", id)
		}
	}
	f.mu.Lock()
	f.now = f.now.Add(3 * time.Second)
	f.mu.Unlock()
	for _, id := range []string{"a", "c", "d"} {
		f.renew(id)
	}
	delete(serving, "b")
	settle("a", "c", "d")
	stayed(before, "b dying", "a", "c", "d")
}

// TestRingClaimRace: two members that claim the same part in turn, each
// before it sees the other's claim: at most one serves it.
func TestRingClaimRace(t *testing.T) {
	f := &ring{leases: map[string]*coordinationv1.Lease{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	serving := map[string]Set{}
	a := f.member("a", serving)
	b := f.member("b", serving)
	// a thinks it is alone (its view lags): it wants everything.
	a.Leases = func() []*coordinationv1.Lease {
		return []*coordinationv1.Lease{f.list()[0]}
	}
	if _, _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !serving["a"].Intersect(serving["b"]).Empty() {
		t.Fatalf("a serves %v and b %v", serving["a"], serving["b"])
	}
}

func typesUID(s string) types.UID { return types.UID(s) }

// TestObjectMoves counts the objects that change owner, over 3,000 UIDs,
// when a fourth replica joins three and when one of the four dies: the
// joiner's objects and the dead replica's, and no others. It logs the
// counts the README states, beside those of rendezvous hashing capped at
// the fair share and computed afresh (what the split did before it started
// from the members' claims).
func TestObjectMoves(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 42))
	uids := make([]uint64, 3000)
	for i := range uids {
		uids[i] = Hash(fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()>>16, r.Uint32()>>16, r.Uint32()>>16, r.Uint64()>>16))
	}
	owners := func(shares map[string]Set) []string {
		out := make([]string, len(uids))
		for i, p := range uids {
			for m, s := range shares {
				if s.Contains(p) {
					if out[i] != "" {
						t.Fatalf("object %d served by %s and %s", i, out[i], m)
					}
					out[i] = m
				}
			}
			if out[i] == "" {
				t.Fatalf("object %d served by nobody", i)
			}
		}
		return out
	}
	count := func(before, after []string, stays func(string) bool) (moved, between int) {
		for i := range before {
			if before[i] != after[i] {
				moved++
				if stays(before[i]) && stays(after[i]) && before[i] != "" {
					between++
				}
			}
		}
		return moved, between
	}
	perReplica := func(o []string) map[string]int {
		n := map[string]int{}
		for _, m := range o {
			n[m]++
		}
		return n
	}
	three := Assign(BucketUnits(), []string{"r1", "r2", "r3"}, nil)
	four := Assign(BucketUnits(), []string{"r1", "r2", "r3", "r4"}, three)
	afresh := Assign(BucketUnits(), []string{"r1", "r2", "r3", "r4"}, nil)
	left := Assign(BucketUnits(), []string{"r1", "r3", "r4"}, four)
	o3, o4, oFresh, oLeft := owners(three), owners(four), owners(afresh), owners(left)

	moved, between := count(o3, o4, func(m string) bool { return m != "r4" })
	if joined := perReplica(o4)["r4"]; moved != joined || between != 0 {
		t.Errorf("3 → 4: %d objects moved, %d of them between replicas that stay; want the joiner's %d and 0", moved, between, joined)
	}
	fresh, _ := count(o3, oFresh, func(string) bool { return true })
	t.Logf("3 → 4 replicas: %d objects moved, all to the joiner (computed afresh: %d); shares %v", moved, fresh, perReplica(o4))

	moved, between = count(o4, oLeft, func(m string) bool { return m != "r2" })
	if dead := perReplica(o4)["r2"]; moved != dead || between != 0 {
		t.Errorf("4 → 3: %d objects moved, %d of them between replicas that stay; want the dead replica's %d and 0", moved, between, dead)
	}
	t.Logf("4 → 3 replicas (r2 dies): %d objects moved, all from r2; shares %v", moved, perReplica(oLeft))
}
