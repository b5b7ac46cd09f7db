package ctrltest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// Exploration is a search for the states production brings that a
// controller does not tolerate: see [Explore].
type Exploration struct {
	// Setup wires the controllers under test into a manager. It is called
	// once for every manager the search starts: each run starts one, and a
	// crash plan starts another after the crash.
	Setup func(*ctrl.Manager) error
	// Options are each manager's options; the search sets Config (the
	// API server, through the plan's perturbations), Namespace (the run's
	// own) and Logger (the run's trace), and clears the fakes and what
	// runs side by side would share: the metrics, health and pprof
	// addresses, leader election and sharding.
	Options ctrl.Options
	// Workload creates and changes objects in w.Namespace, calling
	// w.Settle where a step ends and the controllers should be idle. The
	// search settles once more after it returns. Its error fails the search
	// in an unperturbed run, and is a finding in a plan's.
	Workload func(w *Workload) error

	// Objects are the objects whose end state each plan must reproduce.
	// Default: every object the controllers or the workload wrote, in the
	// reference or the plan's run. An object whose owner references all
	// name objects that are gone counts as absent: a cluster's garbage
	// collector, which the test's control plane lacks, deletes it.
	Objects []ObjectRef
	// Fields are the fields compared, as dotted paths such as "spec",
	// "status.phase" or "data". Default: every field but the metadata the
	// server sets (uid, resourceVersion, generation, creationTimestamp,
	// managedFields) and owner references' uids; in every value the run's
	// namespace, times and uids are masked.
	Fields []string
	// Settle bounds each settling: a run whose controllers are not idle
	// within it is a finding. Between the workload's steps a retry due in
	// more than a second does not count as work; at the end the controllers
	// must be idle with no retry due within Settle, so a controller that
	// requeues itself periodically needs a Settle shorter than its period.
	// A plan's settling ends sooner, with its finding, once a key has failed
	// three times in a row with the same error while nothing changed (no
	// watch event reached the managers, no write succeeded) for twice the
	// longest time the reference runs went without a change, and at least
	// a second: its retries cannot succeed. Default: 1 minute.
	Settle time.Duration
	// Faults adds plans of the faults ctrl itself survives, applied to the
	// controllers under test: a write answered 409 Conflict or 429 Too Many
	// Requests instead of being sent, a watch ended with 410 Gone (and its
	// resumption refused) at the start of a step, and, with Serial, the API
	// server restarted at the start of a step.
	Faults bool
	// Serial runs one plan at a time, and the two reference runs one after
	// the other, for workloads that write cluster-scoped objects, which runs
	// in parallel would share (such a workload deletes them before it
	// ends, for the next run to create them again). Default:
	// plans run in parallel, as many as go test's -parallel allows
	// ([Search]: two).
	Serial bool
}

// ObjectRef names an object that [Exploration] compares at the end of each
// run: in the run's namespace unless ClusterScoped.
type ObjectRef struct {
	// Resource is the object's resource, such as {Version: "v1",
	// Resource: "configmaps"}.
	Resource schema.GroupVersionResource
	// Name is the object's name.
	Name string
	// ClusterScoped says the resource is not namespaced.
	ClusterScoped bool
}

// Workload is one run's handle for [Exploration.Workload].
type Workload struct {
	// Namespace is the run's own namespace, created for it: the managers'
	// caches see only it (ctrl.Options.Namespace).
	Namespace string
	// Config reaches the API server directly, past the plan's
	// perturbations, as the workload's own clients must; the objects
	// written through it are compared at the end.
	Config *rest.Config

	ctx context.Context
	r   *run
}

// Context returns the run's context, done when the run is abandoned.
func (w *Workload) Context() context.Context { return w.ctx }

// Settle ends a step of the workload: it returns once the controllers have
// seen the workload's writes and are idle (ctrl's Manager.WaitIdle), across
// any restart a crash plan caused, with every event a plan held back
// delivered (but a stale view's, which lasts to the end of the next step).
// Its error (the controllers did not settle within Exploration.Settle) is
// a finding; return it.
func (w *Workload) Settle() error { return w.r.settle(false) }

// ClientFor returns a client of T for a workload: its reads and writes go
// to the API server directly, as another user's would.
func ClientFor[T ctrl.Object](w *Workload) (*ctrl.Client[T], error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	if w.r.direct == nil {
		m, err := ctrl.NewManager(ctrl.Options{Config: w.Config, Namespace: w.Namespace})
		if err != nil {
			return nil, err
		}
		w.r.direct = m
	}
	c, err := ctrl.NewClient[T](w.r.direct, ctrl.ClientOptions{})
	if err != nil {
		return nil, err
	}
	return c.Uncached(), nil
}

// Finding is a plan under which the controllers end in another state than
// in the reference runs, or do not settle.
type Finding struct {
	// Plan is the plan's ID, the name of its subtest under Explore.
	Plan string
	// Injected says what the plan did: "crashed the manager after patch
	// widgets/greeting/status #1".
	Injected string
	// Diff lists how the end state differs from the reference, one line
	// per object or field.
	Diff []string
	// Err is why the run did not settle or failed, or nil.
	Err error
	// Trace is what the managers sent, saw and logged around the
	// injection, one line each, with the time since the run began.
	Trace []string
}

func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s: %s\n", f.Plan, f.Injected)
	if f.Err != nil {
		fmt.Fprintf(&b, "did not settle: %v\n", f.Err)
	}
	if len(f.Diff) > 0 {
		b.WriteString("end state differs from the reference:\n")
		for _, d := range f.Diff {
			fmt.Fprintf(&b, "  %s\n", d)
		}
	}
	b.WriteString("around the injection:\n")
	for _, l := range f.Trace {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}

// Explore runs x.Workload against managers wired by x.Setup on env's API
// server: twice unperturbed, the reference (fields that differ between the
// two are not compared), then once for each plan drawn from what the
// reference did, each a parallel subtest of t.Run("plans") named by the
// plan's ID. A plan's subtest fails with a [Finding] if its end state
// differs from the reference or it does not settle, printing the command
// that replays it: go test -run '^TestName$/^plans$/^ID$' with the
// package's import path, which runs that plan whether or not the new
// reference draws it, and fails saying why if it selects no plan or the
// plan's point does not come (nothing injected: nothing tested). A -run
// pattern that selects no plan fails too. The search ends with a line of
// what it tested, printed without -v: the plans drawn, run and injected,
// and the findings, by kind.
//
// The plans, four kinds always and four with x.Faults:
//   - crash-after-WRITE-N: the manager is stopped right after the N-th
//     time it sent that write (a create, update, patch or delete of one
//     object, or of its subresource), as a crash stops it: every later
//     request of it fails, its caches and queues are lost, and a new
//     manager starts; the workload goes on. One plan per write of the
//     reference.
//   - stale-RESOURCE-step-N: from the start of the workload's step N to
//     the end of step N+1, the managers see no event of that resource:
//     their view of it stays as it was while the server moves on and their
//     writes still land. Each of the two steps ends once the managers are
//     idle on that view (or after 3 seconds, if a write of theirs waits for
//     a held event); then they catch up and settle.
//   - timetravel-RESOURCE-step-N: the manager crashes at the start of
//     step N, and the new manager's lists of the resource are answered with
//     the state recorded at the start of step N-1, as by a lagging API
//     server of a highly available control plane (Sieve's time travel); its
//     watches of the resource resume from there, their events held, until
//     the managers are idle on that view (or 3 seconds have passed, as for
//     a stale view); then the watches end with 410 Gone and the managers
//     list the resource again. One plan per resource and step N > 0 with
//     an event of it in step N-1.
//   - unobserved-RESOURCE-NAME-N: the N-th event of that object in a watch
//     is never delivered when another event of it follows: the managers
//     see the object jump over a state. One plan per event of the
//     reference that another of the same object followed within a step.
//   - conflict-WRITE-N (Faults): that write (not a create) is answered 409
//     Conflict, not sent.
//   - throttled-WRITE-N (Faults): that write (not a create) is answered 429 Too Many
//     Requests with Retry-After: 1, as the API server's priority and
//     fairness answers (client-go waits and sends it again).
//   - gone-RESOURCE-step-N (Faults): at the start of step N, the
//     resource's watches end with 410 Gone and their resumption is refused,
//     so the caches list again.
//   - restart-apiserver-step-N (Faults and Serial): at the start of step
//     N the API server is killed and started again (env.StopAPIServer,
//     StartAPIServer); plans running beside it would see the outage too.
//
// With testing.Short, a sample runs: at most two plans of each kind.
// Each run works in a namespace of its own, which it leaves behind (no
// namespace controller runs on the test's API server).
func Explore(t *testing.T, env *Env, x Exploration) {
	t.Helper()
	var sum summary
	t.Run("plans", func(t *testing.T) {
		s, err := newSearch(env, x)
		if err != nil {
			t.Fatal(err)
		}
		plans, err := s.reference(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ctrltest: %d plans from the reference (%d writes, %d watch events, %d steps)", len(plans), len(s.ref.writes), len(s.ref.events), s.ref.steps)
		sum.drawn = len(plans)
		drawn := map[string]bool{}
		for _, p := range plans {
			drawn[p.id] = true
		}
		patterns := planPatterns(runFlag(), t.Name())
		// A plan named by its ID alone, as a finding's replay command
		// names it, must inject, or its pass would mean nothing.
		replays := map[string]bool{}
		if patterns == nil {
			plans = sample(plans, testing.Short())
		} else {
			var why string
			if plans, why = replayed(plans, patterns); why != "" {
				t.Fatalf("ctrltest: -run selects no plan to run: %s", why)
			}
			for _, pat := range patterns {
				if id, ok := literal(pat); ok {
					replays[id] = true
				}
			}
		}
		for _, p := range plans {
			t.Run(p.id, func(t *testing.T) {
				if !x.Serial {
					t.Parallel()
				}
				if !drawn[p.id] {
					t.Logf("ctrltest: plan %s is not among the plans this run's reference drew; it runs as its ID says", p.id)
				}
				f, injected, err := s.try(t.Context(), p)
				if err != nil {
					t.Fatal(err)
				}
				sum.add(p.kind, injected != "", f != nil)
				switch {
				case injected == "" && replays[p.id]:
					why := "this run's reference drew it, but the managers did not get there again (a race in the controllers)"
					if !drawn[p.id] {
						why = "this run's reference did not draw it either: it came from a race of another run, or from other controllers or another workload"
					}
					t.Errorf("ctrltest: plan %s: nothing was injected: its point (%s) did not come in this run, so the replay tested nothing; "+
						"%s: run it again, or the whole search", p.id, p.describe(), why)
				case injected == "":
					t.Log("ctrltest: the plan's point did not come in this run: nothing was injected")
				default:
					t.Logf("ctrltest: %s", injected)
				}
				if f != nil {
					t.Errorf("ctrltest: %sreplay: %s", f, replayCommand(t.Name()))
				}
			})
		}
	})
	sum.print(t.Name())
}

// describe says where the plan acts, for a replay that did not get there.
func (p plan) describe() string {
	switch p.kind {
	case kindCrash:
		return "a crash after the manager's write " + p.point
	case kindConflict, kindThrottled:
		return "the manager's write " + p.point
	case kindUnobserved:
		return "the watch event " + p.point
	}
	return fmt.Sprintf("step %d", p.step)
}

// replayed returns the plans -run's patterns select: those the reference
// drew that a pattern matches, and the plan each pattern that names an ID
// alone names, drawn or not; why says why there is none.
func replayed(plans []plan, patterns []string) (_ []plan, why string) {
	var out []plan
	for _, p := range plans {
		for _, pat := range patterns {
			if ok, _ := regexp.MatchString(pat, p.id); ok {
				out = append(out, p)
				break
			}
		}
	}
	for _, pat := range patterns {
		id, ok := literal(pat)
		if !ok || slices.ContainsFunc(out, func(p plan) bool { return p.id == id }) {
			continue
		}
		p, ok := planByID(id)
		if !ok {
			return nil, fmt.Sprintf("-run names plan %q, which is no plan's ID (IDs begin with %s)", id, kindPrefixes())
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Sprintf("-run selects none of the %d plans this run's reference drew (pattern %q): %s",
			len(plans), strings.Join(patterns, "|"), strings.Join(ids(plans, 12), " "))
	}
	return out, ""
}

func kindPrefixes() string {
	var ps []string
	for _, k := range planKinds {
		ps = append(ps, k.prefix)
	}
	return strings.Join(ps, ", ")
}

// ids lists up to n plans' IDs.
func ids(plans []plan, n int) []string {
	var out []string
	for i, p := range plans {
		if i == n {
			out = append(out, fmt.Sprintf("and %d more", len(plans)-n))
			break
		}
		out = append(out, p.id)
	}
	return out
}

// literal returns the name an anchored pattern ("^name$") matches alone.
func literal(pattern string) (string, bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", false
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) != 3 || re.Sub[0].Op != syntax.OpBeginText ||
		re.Sub[1].Op != syntax.OpLiteral || re.Sub[1].Flags&syntax.FoldCase != 0 || re.Sub[2].Op != syntax.OpEndText {
		return "", false
	}
	return string(re.Sub[1].Rune), true
}

func runFlag() string {
	if f := flag.Lookup("test.run"); f != nil {
		return f.Value.String()
	}
	return ""
}

// planPatterns returns the patterns go test's -run gives the subtests of
// the test named parent (the plans), or nil if it selects them all.
func planPatterns(run, parent string) []string {
	if run == "" {
		return nil
	}
	names := strings.Split(parent, "/")
	var out []string
	for _, alt := range splitTop(run, '|') {
		levels := splitTop(alt, '/')
		match := true
		for i := 0; i < len(names) && i < len(levels); i++ {
			if ok, err := regexp.MatchString(levels[i], names[i]); err != nil || !ok {
				match = false
				break
			}
		}
		switch {
		case !match:
		case len(levels) <= len(names):
			return nil // this alternative runs every plan
		default:
			out = append(out, levels[len(names)])
		}
	}
	return out
}

// splitTop splits a -run pattern at sep outside brackets and parentheses,
// as go test does.
func splitTop(s string, sep byte) []string {
	var out []string
	cs, cp, start := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			cs++
		case ']':
			if cs--; cs < 0 {
				cs = 0
			}
		case '(':
			if cs == 0 {
				cp++
			}
		case ')':
			if cs == 0 {
				cp--
			}
		case '\\':
			i++
		case sep:
			if cs == 0 && cp == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// replayCommand is the go test command that runs the test name alone,
// from anywhere in its module.
func replayCommand(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := fmt.Sprintf("go test -count=1 -run '%s'", strings.Join(parts, "/"))
	if pkg := packagePath(); pkg != "" {
		cmd += " " + pkg
	}
	return cmd
}

// packagePath is the import path of the package under test, read from
// the go.mod above the directory go test runs it in, or "".
var packagePath = sync.OnceValue(func() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for rel := ""; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			mod := modulePath(filepath.Join(dir, "go.mod"))
			if mod == "" || rel == "" {
				return mod
			}
			return mod + "/" + rel
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		rel = path.Join(filepath.Base(dir), rel)
		dir = parent
	}
})

// summary counts what the plans of a search did, by kind.
type summary struct {
	mu    sync.Mutex
	drawn int
	kinds []planKind
	by    map[planKind]*[3]int // run, injected, findings
}

func (s *summary) add(k planKind, injected, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[planKind]*[3]int{}
	}
	c := s.by[k]
	if c == nil {
		c = new([3]int)
		s.by[k] = c
		s.kinds = append(s.kinds, k)
	}
	c[0]++
	if injected {
		c[1]++
	}
	if found {
		c[2]++
	}
}

// String is the summary's line: "plans: 40 drawn, 40 run, 31 injected;
// findings: 0; by kind (run/injected/findings): crash 12/12/0, ...".
func (s *summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total [3]int
	var kinds []string
	slices.SortFunc(s.kinds, func(a, b planKind) int {
		return slices.IndexFunc(planKinds, func(k kindInfo) bool { return k.kind == a }) -
			slices.IndexFunc(planKinds, func(k kindInfo) bool { return k.kind == b })
	})
	for _, k := range s.kinds {
		c := s.by[k]
		for i := range total {
			total[i] += c[i]
		}
		kinds = append(kinds, fmt.Sprintf("%s %d/%d/%d", k, c[0], c[1], c[2]))
	}
	line := fmt.Sprintf("plans: %d drawn, %d run, %d injected; findings: %d", s.drawn, total[0], total[1], total[2])
	if len(kinds) > 0 {
		line += "; by kind (run/injected/findings): " + strings.Join(kinds, ", ")
	}
	return line
}

// print writes the summary to the test binary's output, where go test
// shows it without -v.
func (s *summary) print(test string) {
	fmt.Printf("ctrltest: %s: %s\n", test, s)
}

// Search runs what [Explore] runs and returns the findings instead of
// failing subtests, for a test that expects them: every plan, two at a time
// unless x.Serial. Only an error of the search itself (the reference did
// not settle, the workload failed) fails tb.
func Search(tb testing.TB, env *Env, x Exploration) []Finding {
	tb.Helper()
	s, err := newSearch(env, x)
	if err != nil {
		tb.Fatal(err)
	}
	plans, err := s.reference(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("ctrltest: %d plans from the reference (%d writes, %d watch events, %d steps)", len(plans), len(s.ref.writes), len(s.ref.events), s.ref.steps)
	var (
		mu       sync.Mutex
		findings []Finding
		errs     []error
		wg       sync.WaitGroup
		sum      = summary{drawn: len(plans)}
	)
	limit := make(chan struct{}, 2)
	if x.Serial {
		limit = make(chan struct{}, 1)
	}
	for _, p := range plans {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			f, injected, err := s.try(tb.Context(), p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("plan %s: %w", p.id, err))
				return
			}
			sum.add(p.kind, injected != "", f != nil)
			if f != nil {
				findings = append(findings, *f)
			}
		}()
	}
	wg.Wait()
	sum.print(tb.Name())
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(findings, func(a, b Finding) int { return strings.Compare(a.Plan, b.Plan) })
	return findings
}

type planKind string

const (
	kindNone       planKind = ""
	kindCrash      planKind = "crash"
	kindStale      planKind = "stale"
	kindUnobserved planKind = "unobserved"
	kindConflict   planKind = "conflict"
	kindGone       planKind = "gone"
	kindThrottled  planKind = "throttled"
	kindRestart    planKind = "restart"
	kindTimeTravel planKind = "timetravel"
)

// plan is one perturbation of a run.
type plan struct {
	id       string
	kind     planKind
	point    string // crash, conflict, throttled: the write's; unobserved: the event's (see point)
	resource string // stale, gone
	step     int    // stale, gone, restart
}

// point names the n-th occurrence of a write ("patch widgets/a/status")
// or of an object's event ("configmaps a") as the plans' IDs do.
func point(what string, n int) string { return fmt.Sprintf("%s-%d", slug(what), n) }

// planKinds are the plans' ID prefixes, in the order plans are drawn;
// stepped kinds end in -step-N.
var planKinds = []kindInfo{
	{"crash-after-", kindCrash, false},
	{"unobserved-", kindUnobserved, false},
	{"stale-", kindStale, true},
	{"timetravel-", kindTimeTravel, true},
	{"conflict-", kindConflict, false},
	{"throttled-", kindThrottled, false},
	{"gone-", kindGone, true},
	{"restart-apiserver-step-", kindRestart, true},
}

var (
	pointID   = regexp.MustCompile(`^[a-z0-9.-]+-[0-9]+$`)
	steppedID = regexp.MustCompile(`^(?:([a-z0-9.]+)-step-)?([0-9]+)$`)
)

type kindInfo struct {
	prefix  string
	kind    planKind
	stepped bool
}

// planByID returns the plan an ID names, whether or not a reference drew
// it: a replay runs the plan it names.
func planByID(id string) (plan, bool) {
	for _, k := range planKinds {
		rest, ok := strings.CutPrefix(id, k.prefix)
		switch {
		case !ok:
			continue
		case !k.stepped && pointID.MatchString(rest):
			return plan{id: id, kind: k.kind, point: rest}, true
		case k.stepped:
			m := steppedID.FindStringSubmatch(rest)
			if m == nil || (m[1] == "") != (k.kind == kindRestart) {
				return plan{}, false
			}
			step, err := strconv.Atoi(m[2])
			if err != nil {
				return plan{}, false
			}
			return plan{id: id, kind: k.kind, resource: m[1], step: step}, true
		}
	}
	return plan{}, false
}

// search is one Explore or Search: the exploration and its reference.
type search struct {
	env   *Env
	x     Exploration
	ref   *result
	noise map[string]bool // "object field" that differ between the two references
	quiet time.Duration   // the references' longest time between two changes
}

func newSearch(env *Env, x Exploration) (*search, error) {
	if env == nil {
		return nil, errors.New("ctrltest: Explore: no control plane (env is nil)")
	}
	if x.Setup == nil || x.Workload == nil {
		return nil, errors.New("ctrltest: Explore: Exploration.Setup and Workload are required")
	}
	if x.Settle <= 0 {
		x.Settle = time.Minute
	}
	return &search{env: env, x: x, noise: map[string]bool{}}, nil
}

// reference runs the workload twice unperturbed and draws the plans from
// the first run.
func (s *search) reference(ctx context.Context) ([]plan, error) {
	var a, b *result
	var errA, errB error
	if s.x.Serial { // cluster-scoped objects: the second run would meet the first's
		a, errA = s.run(ctx, plan{id: "reference"}, nil)
		b, errB = s.run(ctx, plan{id: "reference"}, nil)
	} else {
		var wg sync.WaitGroup
		wg.Go(func() { a, errA = s.run(ctx, plan{id: "reference"}, nil) })
		wg.Go(func() { b, errB = s.run(ctx, plan{id: "reference"}, nil) })
		wg.Wait()
	}
	for _, r := range []struct {
		res *result
		err error
	}{{a, errA}, {b, errB}} {
		if r.err != nil {
			return nil, fmt.Errorf("ctrltest: Explore: the reference run: %w", r.err)
		}
		if r.res.err != nil {
			return nil, fmt.Errorf("ctrltest: Explore: the reference run did not settle: %w\n%s", r.res.err, strings.Join(r.res.trace.around(40, 0), "\n"))
		}
	}
	// Objects that only one reference has, and fields that differ, are
	// left out of every comparison.
	for _, d := range diffStates(a.state, b.state, nil) {
		s.noise[d.object+" "+d.field] = true
	}
	s.ref = a
	s.quiet = max(a.quiet, b.quiet)
	return s.plans(), nil
}

// plans draws the plans from the reference.
func (s *search) plans() []plan {
	r := s.ref
	var out []plan
	for _, w := range r.writes {
		out = append(out, plan{id: "crash-after-" + w, kind: kindCrash, point: w})
	}
	seen := map[string]bool{}
	for i, e := range r.events {
		at := point(e.resource+" "+e.name, e.n)
		if seen[at] {
			continue
		}
		for _, later := range r.events[i+1:] {
			if later.resource == e.resource && later.name == e.name && later.step == e.step && later.n > e.n {
				seen[at] = true
				out = append(out, plan{id: "unobserved-" + at, kind: kindUnobserved, point: at})
				break
			}
		}
	}
	resources := slices.Sorted(maps.Keys(r.watched))
	// A resource with no event in the two steps a stale view lasts has
	// nothing to go stale.
	type at struct {
		resource string
		step     int
	}
	var moved []at
	for step := range r.steps {
		for _, res := range resources {
			if slices.ContainsFunc(r.events, func(e eventRecord) bool { return e.resource == res && (e.step == step || e.step == step+1) }) {
				moved = append(moved, at{res, step})
			}
		}
	}
	for _, m := range moved {
		out = append(out, plan{id: fmt.Sprintf("stale-%s-step-%d", slug(m.resource), m.step), kind: kindStale, resource: m.resource, step: m.step})
	}
	// A crash at the start of a step, its successor served the state of
	// a resource that changed in the step before.
	for step := 1; step < r.steps; step++ {
		for _, res := range resources {
			if slices.ContainsFunc(r.events, func(e eventRecord) bool { return e.resource == res && e.step == step-1 }) {
				out = append(out, plan{id: fmt.Sprintf("timetravel-%s-step-%d", slug(res), step), kind: kindTimeTravel, resource: res, step: step})
			}
		}
	}
	if s.x.Faults {
		for _, w := range r.writes {
			if !strings.HasPrefix(w, "create-") {
				out = append(out, plan{id: "conflict-" + w, kind: kindConflict, point: w})
				out = append(out, plan{id: "throttled-" + w, kind: kindThrottled, point: w})
			}
		}
		steps := map[int]bool{}
		for _, m := range moved {
			out = append(out, plan{id: fmt.Sprintf("gone-%s-step-%d", slug(m.resource), m.step), kind: kindGone, resource: m.resource, step: m.step})
			if s.x.Serial && !steps[m.step] {
				steps[m.step] = true
				out = append(out, plan{id: fmt.Sprintf("restart-apiserver-step-%d", m.step), kind: kindRestart, step: m.step})
			}
		}
	}
	return out
}

var unslug = regexp.MustCompile(`[^a-z0-9.]+`)

func slug(s string) string {
	return strings.Trim(unslug.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// sample keeps at most two plans of each kind, the first and the last, in
// short mode.
func sample(plans []plan, short bool) []plan {
	if !short {
		return plans
	}
	byKind := map[planKind][]plan{}
	var kinds []planKind
	for _, p := range plans {
		if byKind[p.kind] == nil {
			kinds = append(kinds, p.kind)
		}
		byKind[p.kind] = append(byKind[p.kind], p)
	}
	var out []plan
	for _, k := range kinds {
		ps := byKind[k]
		out = append(out, ps[0])
		if len(ps) > 1 {
			out = append(out, ps[len(ps)-1])
		}
	}
	return out
}

// try runs one plan and compares its end with the reference: a Finding if
// they differ or it did not settle, nil if they agree or the plan's point
// never came.
func (s *search) try(ctx context.Context, p plan) (_ *Finding, injected string, _ error) {
	res, err := s.run(ctx, p, s.ref.objects)
	if err != nil {
		return nil, "", err
	}
	injected = res.trace.injection()
	var diff []string
	for _, d := range diffStates(s.ref.state, res.state, s.x.Fields) {
		if !s.noise[d.object+" "+d.field] && !s.noise[d.object+" "] {
			diff = append(diff, d.String())
		}
	}
	if len(diff) == 0 && res.err == nil {
		return nil, injected, nil
	}
	what := injected
	if what == "" {
		what = "(nothing injected: the plan's point did not come)"
	}
	return &Finding{Plan: p.id, Injected: what, Diff: diff, Err: res.err, Trace: res.trace.around(25, 25)}, injected, nil
}

// run is one run of the workload under a plan.
type run struct {
	s     *search
	plan  plan
	ns    string
	p     *perturber
	trace *trace
	ctx   context.Context

	mu        sync.Mutex
	mgr       *ctrl.Manager
	cancel    context.CancelFunc
	done      chan error
	gen       int
	restarted chan struct{} // closed once a crashed manager's successor started
	snap      *snapshot     // a time-travel plan's, recorded a step before its crash
	startErr  error
	faultErr  error         // the plan could not apply its fault
	direct    *ctrl.Manager // ClientFor's, never started
	steps     int
}

// result is what a run leaves: its end state and what it recorded.
type result struct {
	state   map[string]map[string]string
	objects []objectKey
	writes  []string
	events  []eventRecord
	watched map[string]bool
	steps   int
	err     error // did not settle
	trace   *trace
	quiet   time.Duration // the longest time between two changes
}

func (s *search) run(ctx context.Context, p plan, compare []objectKey) (*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := kubernetes.NewForConfig(s.env.Config())
	if err != nil {
		return nil, err
	}
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "explore-"}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the run's namespace: %w", err)
	}
	defer cs.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), nsObj.Name, metav1.DeleteOptions{})
	tr := newTrace()
	st := newStuck(0) // a reference run must settle
	if p.kind != kindNone {
		st = newStuck(quietFloor(s.quiet, s.x.Settle))
	}
	r := &run{s: s, plan: p, ns: nsObj.Name, p: newPerturber(p, tr, st, nsObj.Name), trace: tr, ctx: ctx, restarted: make(chan struct{})}
	if err := r.startManager(); err != nil {
		return nil, err
	}
	defer r.stopManager()
	crashDone := make(chan struct{})
	go func() {
		defer close(crashDone)
		select {
		case <-r.p.crash:
			r.restart()
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-crashDone }()

	res := &result{trace: tr}
	// Step 0 starts once the first manager has synced.
	if err := r.waitIdle(time.Second); err != nil {
		res.err = err
	} else {
		r.beginStep(0)
		cfg := s.env.Config()
		cfg.Wrap(r.p.wrapWorkload)
		w := &Workload{Namespace: r.ns, Config: cfg, ctx: ctx, r: r}
		werr := s.x.Workload(w)
		switch {
		case werr != nil && isSettleError(werr):
			res.err = werr
		case werr != nil:
			if p.kind == kindNone {
				return nil, fmt.Errorf("the workload: %w", werr)
			}
			res.err = fmt.Errorf("the workload failed: %w", werr)
		default:
			res.err = r.settle(true)
		}
	}
	r.mu.Lock()
	if r.faultErr != nil {
		r.mu.Unlock()
		return nil, r.faultErr
	}
	if r.startErr != nil && res.err == nil {
		res.err = r.startErr
	}
	res.steps = r.steps
	r.mu.Unlock()
	res.quiet = st.longestQuiet()

	r.p.mu.Lock()
	res.writes = slices.Clone(r.p.order)
	res.events = slices.Clone(r.p.events)
	res.watched = r.p.watched
	objs := append(slices.Clone(compare), r.p.objectKeys()...)
	r.p.mu.Unlock()
	if len(s.x.Objects) > 0 {
		objs = nil
		for _, o := range s.x.Objects {
			objs = append(objs, objectKey{gvr: o.Resource, name: o.Name, namespaced: !o.ClusterScoped})
		}
	}
	res.objects = dedupe(objs)
	res.state, err = capture(ctx, s.env.Config(), r.ns, res.objects)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// settleError marks Settle's errors, which are findings, not the workload's
// own failures.
type settleError struct{ err error }

func (e *settleError) Error() string { return e.err.Error() }
func (e *settleError) Unwrap() error { return e.err }

func isSettleError(err error) bool {
	var se *settleError
	return errors.As(err, &se)
}

func (r *run) startManager() error {
	l := &life{}
	cfg := r.s.env.Config()
	cfg.Wrap(r.p.wrap(l))
	opts := r.s.x.Options
	opts.Config, opts.Namespace = cfg, r.ns
	r.mu.Lock()
	r.gen++
	gen := r.gen
	r.mu.Unlock()
	opts.Logger = r.trace.logger(fmt.Sprintf("manager %d", gen), r.p.stuck.failed)
	opts.FakeClientset, opts.FakeDynamic = nil, nil
	// What runs side by side would share: ports, Leases, Sharding's
	// memberships.
	opts.MetricsAddress, opts.HealthAddress, opts.PprofAddress = "", "", ""
	opts.LeaderElection, opts.Sharding = ctrl.LeaderElection{}, ctrl.Sharding{}
	m, err := ctrl.NewManager(opts)
	if err != nil {
		return fmt.Errorf("ctrltest: Explore: NewManager: %w", err)
	}
	if err := r.s.x.Setup(m); err != nil {
		return fmt.Errorf("ctrltest: Explore: Setup: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.ctx))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	r.mu.Lock()
	r.mgr, r.cancel, r.done = m, cancel, done
	r.mu.Unlock()
	return nil
}

// stopManager stops the current manager and waits for it.
func (r *run) stopManager() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	cancel()
	return <-done
}

// restart replaces a crashed manager with a new one.
func (r *run) restart() {
	defer close(r.restarted)
	r.stopManager()
	r.trace.add("a new manager starts")
	r.p.stuck.changed()
	if err := r.startManager(); err != nil {
		r.mu.Lock()
		r.startErr = err
		r.mu.Unlock()
	}
}

// waitIdle waits until the current manager is idle, across a crash's
// restart, once the managers have seen the workload's writes; an event a
// plan holds back for a successor that does not come (the managers are
// idle) is delivered, and the managers settle again. Retries due later than
// requeueWithin do not count.
func (r *run) waitIdle(requeueWithin time.Duration) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.s.x.Settle)
	defer cancel()
	ctx, stop := r.p.stuck.watch(ctx) // ends the wait once the outcome is known
	defer stop()
	for {
		if err := r.p.waitWrites(ctx, true); err != nil {
			return &settleError{fmt.Errorf("the managers' watches did not deliver the workload's writes: %w", err)}
		}
		if r.p.crashed() {
			select {
			case <-r.restarted:
			case <-ctx.Done():
				return &settleError{fmt.Errorf("no new manager after the crash: %w", context.Cause(ctx))}
			}
		}
		r.mu.Lock()
		m, gen, startErr := r.mgr, r.gen, r.startErr
		r.mu.Unlock()
		if startErr != nil {
			return &settleError{startErr}
		}
		err := m.WaitIdle(ctx, requeueWithin)
		r.mu.Lock()
		moved := r.gen != gen
		r.mu.Unlock()
		if moved || (gen == 1 && r.p.crashed()) {
			continue // the manager waited for crashed
		}
		if err != nil {
			return &settleError{err}
		}
		if !r.p.endStep() {
			return nil
		}
	}
}

// settle ends a step: stashed events are delivered, the managers settle,
// and the next step's perturbation begins. A stale view lasts through the
// step after the one it began in, and ends at the final settle.
func (r *run) settle(final bool) error {
	// A stashed event is delivered only once the event that would
	// replace it had its chance to arrive.
	ctx, cancel := context.WithTimeout(r.ctx, r.s.x.Settle)
	err := r.p.waitWrites(ctx, false)
	cancel()
	if err != nil {
		return &settleError{fmt.Errorf("the managers' watches did not receive the workload's writes: %w", err)}
	}
	r.p.endStep()
	r.mu.Lock()
	step := r.steps
	r.mu.Unlock()
	if r.p.holding() {
		// The controllers act on their stale view until idle, or for as
		// long as their own writes wait for events that are held.
		ctx, cancel := context.WithTimeout(r.ctx, min(r.s.x.Settle, 3*time.Second))
		if r.p.crashed() {
			select {
			case <-r.restarted:
			case <-ctx.Done():
			}
		}
		r.mu.Lock()
		m := r.mgr
		r.mu.Unlock()
		if r.p.waitWrites(ctx, true) == nil {
			m.WaitIdle(ctx, r.s.x.Settle)
		}
		cancel()
		// A stale view lasts through the step after its own; a time
		// traveler's successor catches up once idle on its old view.
		last := r.plan.step
		if r.plan.kind == kindStale {
			last++
		}
		if step >= last || final {
			if r.plan.kind == kindTimeTravel {
				// The lagging server's history is gone: its watches end
				// with 410 Gone, and the managers list again.
				r.p.mu.Lock()
				r.p.travel, r.p.catchup = nil, r.plan.resource
				r.p.mu.Unlock()
				r.p.expire(r.plan.resource)
			}
			r.p.release()
			r.trace.add("released the held events: the managers catch up")
		}
	}
	if !r.p.holding() {
		// Between steps a retry due later does not hold the workload
		// back; at the end the managers get Settle to converge.
		requeueWithin := time.Second
		if final {
			requeueWithin = r.s.x.Settle
		}
		if err := r.waitIdle(requeueWithin); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.steps++
	r.mu.Unlock()
	r.beginStep(step + 1)
	return nil
}

func (r *run) beginStep(step int) {
	r.p.mu.Lock()
	r.p.step = step
	r.p.mu.Unlock()
	r.trace.add("step %d begins", step)
	p := r.plan
	if p.kind == kindTimeTravel && p.step == step+1 {
		snap, ok, err := r.p.record(r.ctx, r.s.env.Config(), p.resource)
		r.mu.Lock()
		r.snap = snap
		if err != nil && r.faultErr == nil {
			r.faultErr = err
		}
		r.mu.Unlock()
		if ok && err == nil {
			r.trace.add("recorded %d %s at resourceVersion %s", len(snap.items), p.resource, snap.rv)
		}
	}
	if p.step != step {
		return
	}
	switch p.kind {
	case kindStale:
		r.p.hold(p.resource)
		r.p.inject("the managers' view of %s goes stale at the start of step %d", p.resource, step)
	case kindGone:
		r.p.inject("the watches of %s end with 410 Gone at the start of step %d", p.resource, step)
		r.p.expire(p.resource)
	case kindTimeTravel:
		r.mu.Lock()
		snap := r.snap
		r.mu.Unlock()
		if snap == nil {
			return // no manager watched the resource a step before
		}
		r.p.hold(p.resource)
		r.p.mu.Lock()
		r.p.travel = snap
		r.p.mu.Unlock()
		r.p.inject("the manager crashed at the start of step %d; its successor's lists of %s are answered as of the start of step %d "+
			"(resourceVersion %s, %d objects), as by a lagging API server, until the managers are idle on that view; then they list it again", step, p.resource, step-1, snap.rv, len(snap.items))
		r.p.crashNow()
	case kindRestart:
		r.p.inject("the API server restarts at the start of step %d", step)
		err := r.s.env.StopAPIServer()
		if err == nil {
			err = r.s.env.StartAPIServer()
		}
		if err != nil {
			r.mu.Lock()
			r.faultErr = fmt.Errorf("restarting the API server: %w", err)
			r.mu.Unlock()
		}
		r.trace.add("the API server is back")
	}
}
