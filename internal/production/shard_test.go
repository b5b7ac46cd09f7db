//go:build linux

package production_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/internal/shard"
)

// The ring's replicas set only LeaseDuration: the renew deadline and the
// retry period follow it (5.3 s and 1.07 s). Short, so that a dead
// replica's share moves in seconds; long enough that a replica renews on a
// loaded machine, where the API server answers a renewal in seconds while
// thousands of writes compete with it (at 4 s, with a renew deadline of
// 2.7 s, replicas lost their membership beside two CPU-bound processes).
const shardLease = 8 * time.Second

// shardBound is how soon after a replica died, or joined, every object of
// the share that moves is reconciled by its new owner: the lease duration
// (a death is noticed only once the dead replica's Lease has expired),
// and a margin of 5 s for the rest: noticing within a retry period, a
// Lease write and a quorum read, a relist of the share, and reconciling it
// with 8 workers, on a loaded machine.
const shardBound = shardLease + 5*time.Second

// shardEarliest is the soonest another replica may take over a share after
// its owner stopped: its Lease expires a lease duration after its last
// renewal began, which may have been a retry period (1.07 s) before it
// stopped.
const shardEarliest = shardLease - shardLease*2/15

const (
	shardChildEnv = "CTRL_PRODUCTION_SHARD_CHILD" // the namespace of the objects
	shardIDEnv    = "CTRL_PRODUCTION_SHARD_ID"    // the replica's identity
	shardKindEnv  = "CTRL_PRODUCTION_SHARD_KIND"  // what it runs: see runShardChild
)

// shardLabel is the label objects carry in label mode.
var shardLabel = shard.Label("ring")

// Gizmo is the custom resource a state machine runs on.
type Gizmo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoSpec   `json:"spec"`
	Status            GizmoStatus `json:"status,omitzero"`
}

// GizmoSpec is what the user asks for.
type GizmoSpec struct {
	Size int `json:"size"`
}

// GizmoStatus is the machine's.
type GizmoStatus struct {
	Phase              GizmoPhase         `json:"phase,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// GizmoPhase is a Gizmo's state.
type GizmoPhase string

func (g *Gizmo) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(g.Status.Conditions)
	return &out
}

func init() {
	err := ctrl.Register[*Gizmo](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "gizmos", Namespaced: true, Status: true})
	if err != nil {
		panic(err)
	}
	if os.Getenv(shardChildEnv) != "" {
		os.Exit(runShardChild())
	}
}

// runShardChild is a replica of the ring in a process of its own, so that
// the test can kill it (SIGKILL) or pause it (SIGSTOP). CTRL_PRODUCTION_SHARD_KIND
// lists what it runs, separated by commas:
//
//   - stamp: a controller of ConfigMaps that stamps each with its identity
//     (annotation "owner"), once per owner;
//   - writer: the stamp controller writes each object again every 50 ms,
//     with a patch that carries no precondition, so that only its
//     membership keeps it from writing;
//   - finalizer: the stamp controller owns a finalizer and has OnDelete;
//   - filtered: the stamp controller takes only updates that change the
//     generation;
//   - twice: a second controller of ConfigMaps, stamping "owner2";
//   - machine: a state machine over Gizmos, and beside it a plain
//     controller of Gizmos.
//
// It prints "run <controller> <name> <uid> <start> <end>" per reconcile
// (CLOCK_MONOTONIC), "finalize" and "ondelete" lines in the same form,
// "leading <bool> <mono>" when its membership changes, "identity <id>",
// and "start returned <mono> <err>" if Start fails.
func runShardChild() int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns, id := os.Getenv(shardChildEnv), os.Getenv(shardIDEnv)
	kinds := map[string]bool{}
	for k := range strings.SplitSeq(os.Getenv(shardKindEnv), ",") {
		kinds[k] = true
	}
	opts := ctrl.Options{Config: cfg, Namespace: ns,
		Sharding: ctrl.Sharding{Ring: "ring", LeaseOptions: ctrl.LeaseOptions{Identity: id, LeaseDuration: shardLease}}}
	if os.Getenv("CTRL_PRODUCTION_SHARD_LOG") != "" { // for debugging a test
		opts.Logger = funcr.New(func(prefix, args string) {
			fmt.Fprintf(os.Stderr, "%s %s %s\n", time.Now().Format("15:04:05.000"), id, args)
		}, funcr.Options{Verbosity: 1})
	}
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		return fail(err)
	}
	stamp := func(name, annotation string) func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		var seq int64
		var seqMu sync.Mutex
		return func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			if strings.HasPrefix(cm.Name, "sentinel") {
				return ctrl.Result{}, nil
			}
			start := monoNow()
			defer func() { say("run %s %s %s %d %d", name, cm.Name, cm.UID, start, monoNow()) }()
			if cm.Annotations[annotation] == ctrl.RequestFrom(ctx).Identity && !kinds["writer"] {
				return ctrl.Result{}, nil
			}
			seqMu.Lock()
			seq++
			n := seq
			seqMu.Unlock()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,%q:"%d"}}}`, annotation, ctrl.RequestFrom(ctx).Identity,
				writerAnnotation, ctrl.RequestFrom(ctx).Identity, seqAnnotation, n)
			_, err := cms.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
			if errors.Is(err, ctrl.ErrLeadershipLost) {
				say("refused %d", monoNow())
			}
			if err == nil && kinds["writer"] {
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
	}
	if kinds["stamp"] {
		c, err := ctrl.NewController(mgr, "stamp", stamp("stamp", "owner"), ctrl.ControllerOptions{Workers: 8})
		if err != nil {
			return fail(err)
		}
		if kinds["finalizer"] {
			hook := func(what string) func(context.Context, *corev1.ConfigMap) error {
				return func(ctx context.Context, cm *corev1.ConfigMap) error {
					start := monoNow()
					say("%s stamp %s %s %d %d", what, cm.Name, cm.UID, start, monoNow())
					return nil
				}
			}
			if err := c.OnFinalize("ctrl.test/cleanup", hook("finalize")); err != nil {
				return fail(err)
			}
			if err := c.OnDelete(hook("ondelete")); err != nil {
				return fail(err)
			}
		}
		if kinds["filtered"] {
			if err := c.FilterUpdates(ctrl.GenerationChanged[*corev1.ConfigMap]); err != nil {
				return fail(err)
			}
		}
		if kinds["writer"] {
			if err := c.FilterUpdates(func(old, obj *corev1.ConfigMap) bool { return false }); err != nil {
				return fail(err)
			}
		}
	}
	if kinds["twice"] {
		if _, err := ctrl.NewController(mgr, "stamp2", stamp("stamp2", "owner2"), ctrl.ControllerOptions{Workers: 4}); err != nil {
			return fail(err)
		}
	}
	if kinds["machine"] {
		_, err := ctrl.NewMachine(mgr, "machine", ctrl.Machine[*Gizmo, GizmoPhase]{
			Initial: "Pending",
			States: map[GizmoPhase]ctrl.State[*Gizmo, GizmoPhase]{
				"Pending": {To: []GizmoPhase{"Ready"}, Step: func(ctx context.Context, g *Gizmo) (ctrl.Next[GizmoPhase], error) {
					start := monoNow()
					say("run machine %s %s %d %d", g.Name, g.UID, start, monoNow())
					return ctrl.Next[GizmoPhase]{To: "Ready"}, nil
				}},
				// Ready's step stays: it shows which replica runs the machine
				// on the object.
				"Ready": {Ready: true, SpecChanged: "Pending", Step: func(ctx context.Context, g *Gizmo) (ctrl.Next[GizmoPhase], error) {
					start := monoNow()
					say("run machine %s %s %d %d", g.Name, g.UID, start, monoNow())
					return ctrl.Next[GizmoPhase]{}, nil
				}},
			},
			Phase:              func(g *Gizmo) *GizmoPhase { return &g.Status.Phase },
			Conditions:         func(g *Gizmo) *[]metav1.Condition { return &g.Status.Conditions },
			ObservedGeneration: func(g *Gizmo) *int64 { return &g.Status.ObservedGeneration },
		}, ctrl.ControllerOptions{Workers: 4})
		if err != nil {
			return fail(err)
		}
		_, err = ctrl.NewController(mgr, "gizmo", func(ctx context.Context, g *Gizmo) (ctrl.Result, error) {
			start := monoNow()
			say("run gizmo %s %s %d %d", g.Name, g.UID, start, monoNow())
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{Workers: 4})
		if err != nil {
			return fail(err)
		}
	}
	go func() {
		for {
			leading, changed := mgr.Leading()
			say("leading %t %d", leading, monoNow())
			<-changed
		}
	}()
	say("identity %s", mgr.Identity())
	if err := mgr.Start(context.Background()); err != nil {
		say("start returned %d %v", monoNow(), err)
		return 1
	}
	return 0
}

// shardChild is a replica process and what it printed.
type shardChild struct {
	id     string
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan error
	killed bool // by the test: its exit is no failure
}

// running holds each test's replica processes, for failing it as soon as
// one exits unasked.
var running sync.Map // *testing.T -> *[]*shardChild

// checkChildren fails the test if one of its replicas exited unasked. It
// is called from the polls of the test's goroutine.
func checkChildren(t *testing.T) {
	t.Helper()
	v, ok := running.Load(t)
	if !ok {
		return
	}
	for _, c := range *v.(*[]*shardChild) {
		c.mu.Lock()
		killed := c.killed
		c.mu.Unlock()
		if !killed {
			c.alive(t)
		}
	}
}

// startShardChild starts replica id over namespace ns of the control
// plane e, running kinds (see runShardChild).
func startShardChild(t *testing.T, e *ctrltest.Env, ns, id, kinds string) *shardChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shardChildEnv+"="+ns, shardIDEnv+"="+id, shardKindEnv+"="+kinds,
		"KUBECONFIG="+e.KubeconfigPath())
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	c := &shardChild{id: id, cmd: cmd, exited: make(chan error, 1)}
	v, _ := running.LoadOrStore(t, &[]*shardChild{})
	*v.(*[]*shardChild) = append(*v.(*[]*shardChild), c)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		running.Delete(t)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.exited
		c.exited <- nil
	})
	return c
}

// printed returns the fields of the lines the child printed that start
// with prefix.
func (c *shardChild) printed(prefix string) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, l := range c.lines {
		if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
			out = append(out, strings.Fields(rest))
		}
	}
	return out
}

// alive fails the test if the child exited.
func (c *shardChild) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.exited:
		c.exited <- err
		t.Fatalf("replica %s exited: %v; it printed %v", c.id, err, c.printed("start"))
	default:
	}
}

// kill kills the child with SIGKILL and returns when it has exited, and
// the monotonic time of the kill.
func (c *shardChild) kill(t *testing.T) int64 {
	t.Helper()
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	at := monoNow()
	must(t, c.cmd.Process.Kill())
	err := <-c.exited
	c.exited <- err
	return at
}

// call is one call of a hook or reconcile, as a replica printed it.
type call struct {
	what, replica, name, uid string
	start, end               int64
}

// calls returns the calls of what ("run", "finalize", "ondelete") the
// children printed, with the controller folded into what for runs.
func calls(children []*shardChild, what string) []call {
	var out []call
	for _, c := range children {
		for _, f := range c.printed(what) {
			if len(f) != 5 {
				continue
			}
			start, _ := strconv.ParseInt(f[3], 10, 64)
			end, _ := strconv.ParseInt(f[4], 10, 64)
			out = append(out, call{what + " " + f[0], c.id, f[1], f[2], start, end})
		}
	}
	return out
}

// overlaps returns the objects two replicas acted on at overlapping
// times: reconciles, finalizers and OnDelete alike.
func overlaps(cs []call) []string {
	by := map[string][]call{}
	for _, c := range cs {
		by[c.name] = append(by[c.name], c)
	}
	var out []string
	for name, cs := range by {
		slices.SortFunc(cs, func(a, b call) int { return int(a.start - b.start) })
		end, who := int64(0), ""
		for _, c := range cs {
			if c.replica != who && c.start < end {
				out = append(out, fmt.Sprintf("%s: %s and %s", name, who, c.replica))
			}
			if c.end > end {
				end, who = c.end, c.replica
			}
		}
	}
	return out
}

// firstAfter returns, for each name, the first call of what by a replica
// other than not that began after at.
func firstAfter(cs []call, what, not string, at int64) map[string]int64 {
	out := map[string]int64{}
	for _, c := range cs {
		if c.what != what || c.replica == not || c.start < at {
			continue
		}
		if t, ok := out[c.name]; !ok || c.start < t {
			out[c.name] = c.start
		}
	}
	return out
}

// ringLeases returns the ring's membership Leases in namespace ns of
// cfg's cluster, by holder.
func ringLeases(t *testing.T, cs kubernetes.Interface, ns string) map[string]*coordinationv1.Lease {
	t.Helper()
	list, err := cs.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{LabelSelector: shard.RingLabel + "=ring"})
	must(t, err)
	out := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		l := &list.Items[i]
		if l.Spec.HolderIdentity != nil {
			out[*l.Spec.HolderIdentity] = l
		}
	}
	return out
}

// objectEvent is one change of an object, as a watch saw it.
type objectEvent struct {
	typ                 watch.EventType
	name, label, owner  string
	finalizers, deleted bool
}

// recorder records every change of the objects of one resource in a
// namespace, from before the objects exist.
type recorder struct {
	mu  sync.Mutex
	all []objectEvent
}

// record watches what list and watch serve until the test ends.
func record(t *testing.T, list func(context.Context) (runtime.Object, error), watchFrom func(context.Context, string) (watch.Interface, error)) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := list(ctx)
	must(t, err)
	lm, err := meta(l)
	must(t, err)
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := lm
		for ctx.Err() == nil {
			w, err := watchFrom(ctx, rv)
			if err != nil {
				time.Sleep(100 * time.Millisecond) // before asking the server again
				continue
			}
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(metav1.Object)
				if !ok || ev.Type == watch.Bookmark {
					continue
				}
				rv = o.GetResourceVersion()
				r.mu.Lock()
				r.all = append(r.all, objectEvent{ev.Type, o.GetName(), o.GetLabels()[shardLabel], o.GetAnnotations()["owner"],
					len(o.GetFinalizers()) > 0, o.GetDeletionTimestamp() != nil})
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func meta(l runtime.Object) (string, error) {
	if lm, ok := l.(metav1.ListInterface); ok {
		return lm.GetResourceVersion(), nil
	}
	return "", fmt.Errorf("%T is not a list", l)
}

// recordConfigMaps records the ConfigMaps of ns.
func recordConfigMaps(t *testing.T, cs kubernetes.Interface, ns string) *recorder {
	return record(t, func(ctx context.Context) (runtime.Object, error) {
		return cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	})
}

// labelWrites returns how many times each object's shard label changed.
func (r *recorder) labelWrites() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]string{}
	out := map[string]int{}
	for _, ev := range r.all {
		if ev.typ == watch.Deleted {
			continue
		}
		if ev.label != last[ev.name] {
			out[ev.name]++
		}
		last[ev.name] = ev.label
	}
	return out
}

// ownersOf returns the objects' owners as stamped, by name.
func ownersOf(t *testing.T, cs kubernetes.Interface, ns string) (map[string]string, []corev1.ConfigMap) {
	t.Helper()
	list, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	out := map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.Annotations["owner"]
	}
	return out, list.Items
}

// shareOf returns the names of the objects whose place in the hash space
// the Lease of replica claims: by their shard label in label mode, by the
// hash of their UID where the server selects.
func shareOf(l *coordinationv1.Lease, cms []corev1.ConfigMap, byLabel bool) []string {
	held := shard.Held(l)
	var out []string
	for _, cm := range cms {
		p := shard.Hash(string(cm.UID))
		if byLabel {
			b, err := strconv.Atoi(cm.Labels[shardLabel])
			if err != nil {
				continue
			}
			p = shard.BucketSpan(b).First
		}
		if held.Contains(p) {
			out = append(out, cm.Name)
		}
	}
	return out
}

// settledOn waits until the live replicas' Leases claim the whole space
// between them, each about its fair share, and every object is stamped by
// the replica whose claim holds it; it returns how long that took.
func settledOn(t *testing.T, cs kubernetes.Interface, ns string, byLabel bool, timeout time.Duration, live ...string) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("%v share the objects", live), func() bool {
		checkChildren(t)
		leases := ringLeases(t, cs, ns)
		owners, cms := ownersOf(t, cs, ns)
		var all shard.Set
		served := 0
		for _, id := range live {
			l := leases[id]
			if l == nil {
				return false
			}
			held := shard.Held(l)
			if f := held.Fraction(); f < 1.0/float64(len(live))-1.0/shard.Buckets-1e-9 {
				return false
			}
			all = all.Union(held)
			share := shareOf(l, cms, byLabel)
			for _, name := range share {
				if owners[name] != id {
					return false
				}
			}
			served += len(share)
		}
		return all.Equal(shard.All) && served == len(cms) // in label mode, every object labeled
	})
}

// createConfigMapsIn creates n ConfigMaps named prefix-i in ns.
func createConfigMapsIn(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%04d", prefix, i)}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// namespaceIn creates a namespace for one test in the cluster of cfg.
func namespaceIn(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shard-"}}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	must(t, err)
	return ns.Name
}

// testDeaths runs three replicas over n ConfigMaps, kills one with SIGKILL,
// lets a fourth join, then kills another: each time the share that moves
// is reconciled by its new owner within shardBound, no object is ever
// reconciled by two replicas at once, and the replicas settle on shares
// that cover every object.
func testDeaths(t *testing.T, e *ctrltest.Env, byLabel bool, kinds string, n int) (*recorder, []*shardChild, string) {
	cs := kubernetes.NewForConfigOrDie(e.Config())
	ns := namespaceIn(t, e.Config())
	rec := recordConfigMaps(t, cs, ns)
	createConfigMapsIn(t, cs, ns, "cm", n)
	r1 := startShardChild(t, e, ns, "r1", kinds)
	r2 := startShardChild(t, e, ns, "r2", kinds)
	r3 := startShardChild(t, e, ns, "r3", kinds)
	children := []*shardChild{r1, r2, r3}
	took := settledOn(t, cs, ns, byLabel, 2*time.Minute, "r1", "r2", "r3")
	t.Logf("r1, r2 and r3 share %d objects %s after they started", n, took.Round(time.Millisecond))
	mode := ringLeases(t, cs, ns)["r1"].Annotations[shard.ModeAnnotation]
	t.Logf("mode: %s", mode)

	// claims maps each object to the replica among ids whose Lease claims it.
	claims := func(ids ...string) map[string]string {
		leases := ringLeases(t, cs, ns)
		_, cms := ownersOf(t, cs, ns)
		out := map[string]string{}
		for _, id := range ids {
			for _, name := range shareOf(leases[id], cms, byLabel) {
				out[name] = id
			}
		}
		return out
	}
	// stayed checks that no object moved between two replicas of ids from
	// before to now: a join takes only from the others, a death gives only
	// its own share.
	stayed := func(before map[string]string, why string, ids ...string) {
		t.Helper()
		after := claims(ids...)
		moved, to := 0, map[string]int{}
		for name, id := range after {
			if was, ok := before[name]; ok && was != id {
				moved++
			}
			to[id]++
		}
		t.Logf("%s: shares %v, %d objects moved between replicas that stayed", why, to, moved)
		if moved > 0 {
			t.Errorf("%s: %d objects moved between replicas that stayed, want 0", why, moved)
		}
	}

	// A death: the others reconcile its share within shardBound.
	death := func(dead *shardChild, others ...*shardChild) {
		t.Helper()
		var ids []string
		for _, o := range others {
			ids = append(ids, o.id)
		}
		before := claims(ids...)
		defer stayed(before, dead.id+" dying", ids...)
		leases := ringLeases(t, cs, ns)
		_, cms := ownersOf(t, cs, ns)
		share := shareOf(leases[dead.id], cms, byLabel)
		killed := dead.kill(t)
		var last int64
		eventually(t, shardBound+30*time.Second, fmt.Sprintf("%v reconcile %s's %d objects", ids, dead.id, len(share)), func() bool {
			checkChildren(t)
			first := firstAfter(calls(children, "run"), "run stamp", dead.id, killed)
			last = 0
			for _, name := range share {
				at, ok := first[name]
				if !ok {
					return false
				}
				last = max(last, at)
			}
			return true
		})
		took := time.Duration(last - killed)
		t.Logf("the last of %s's %d objects was reconciled by another replica %s after %s was killed -9 (lease %s, bound %s)",
			dead.id, len(share), took.Round(time.Millisecond), dead.id, shardLease, shardBound)
		if took > shardBound {
			t.Errorf("%s's objects were reconciled %s after its death, want within %s", dead.id, took.Round(time.Millisecond), shardBound)
		}
		if took < shardEarliest {
			t.Errorf("%s's objects were taken %s after its death, before its Lease could expire", dead.id, took.Round(time.Millisecond))
		}
		settledOn(t, cs, ns, byLabel, time.Minute, ids...)
	}
	death(r3, r1, r2)

	// A join: the newcomer reconciles its share within shardBound of its
	// joining (its Lease's creation).
	before := claims("r1", "r2")
	started := time.Now()
	r4 := startShardChild(t, e, ns, "r4", kinds)
	children = append(children, r4)
	eventually(t, 30*time.Second, "r4 joins", func() bool { return ringLeases(t, cs, ns)["r4"] != nil })
	took = settledOn(t, cs, ns, byLabel, time.Minute, "r1", "r2", "r4")
	t.Logf("r4 took its share %s after its Lease appeared (%s after its process started)",
		took.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	if took > shardBound {
		t.Errorf("r4 took its share %s after joining, want within %s", took.Round(time.Millisecond), shardBound)
	}
	stayed(before, "r4 joining", "r1", "r2")

	// A second death, after the first and the join.
	death(r1, r2, r4)
	for _, c := range []*shardChild{r2, r4} {
		c.alive(t)
	}
	if o := overlaps(calls(children, "run")); len(o) > 0 {
		t.Errorf("%d objects reconciled by two replicas at once, first: %v", len(o), o[:min(5, len(o))])
	}
	return rec, children, ns
}

// TestShardingLabels: a ring in label mode (the API server does not
// select by hash), whose controller owns a finalizer. Each object gets its
// shard label once, and keeps it through every move; moves run no cleanup
// (a label-selected cache sees a moved object leave, as it sees a deleted
// one), and every deletion runs it once.
func TestShardingLabels(t *testing.T) {
	const n = 600
	rec, children, ns := testDeaths(t, env, true, "stamp,finalizer", n)
	writes := rec.labelWrites()
	for name, k := range writes {
		if k != 1 {
			t.Errorf("%s: its shard label was written %d times, want once", name, k)
			break
		}
	}
	if len(writes) != n {
		t.Errorf("%d objects labeled, want %d", len(writes), n)
	}
	testCleanup(t, env, ns, children, n)
}

// TestShardingControllersOfOneType: each replica runs two controllers of
// ConfigMaps, one of them filtered to generation changes, and a state
// machine beside a plain controller of Gizmos. Nothing crashes; each
// object is labeled once whatever the number of controllers of its type;
// and a replica that joins has every one of its objects reconciled by all
// four controllers within shardBound, filters or not.
func TestShardingControllersOfOneType(t *testing.T) {
	const n = 200
	cs := kubernetes.NewForConfigOrDie(env.Config())
	dyn := dynamic.NewForConfigOrDie(env.Config())
	gizmos := func(ns string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}).Namespace(ns)
	}
	ns := namespaceIn(t, env.Config())
	cms := recordConfigMaps(t, cs, ns)
	gs := record(t, func(ctx context.Context) (runtime.Object, error) { return gizmos(ns).List(ctx, metav1.ListOptions{}) },
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return gizmos(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		})
	createConfigMapsIn(t, cs, ns, "cm", n)
	for i := range n {
		g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": fmt.Sprintf("g-%04d", i)}, "spec": map[string]any{"size": int64(1)}}}
		_, err := gizmos(ns).Create(context.Background(), g, metav1.CreateOptions{})
		must(t, err)
	}
	const kinds = "stamp,filtered,twice,machine"
	r1 := startShardChild(t, env, ns, "r1", kinds)
	r2 := startShardChild(t, env, ns, "r2", kinds)
	children := []*shardChild{r1, r2}
	settledOn(t, cs, ns, true, 2*time.Minute, "r1", "r2")

	started := time.Now()
	joined := monoNow()
	r3 := startShardChild(t, env, ns, "r3", kinds)
	children = append(children, r3)
	eventually(t, 30*time.Second, "r3 joins", func() bool { return ringLeases(t, cs, ns)["r3"] != nil })
	took := eventually(t, time.Minute, "r3 runs every controller on its share", func() bool {
		checkChildren(t)
		l := ringLeases(t, cs, ns)["r3"]
		if l == nil || shard.Held(l).Fraction() < 1.0/3-1.0/shard.Buckets-1e-9 {
			return false
		}
		held := shard.Held(l)
		cmList, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		gList, err := gizmos(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		want := map[string][]string{}
		for _, cm := range cmList.Items {
			if b, err := strconv.Atoi(cm.Labels[shardLabel]); err == nil && held.Contains(shard.BucketSpan(b).First) {
				want["run stamp"] = append(want["run stamp"], cm.Name)
				want["run stamp2"] = append(want["run stamp2"], cm.Name)
			}
		}
		for _, g := range gList.Items {
			if b, err := strconv.Atoi(g.GetLabels()[shardLabel]); err == nil && held.Contains(shard.BucketSpan(b).First) {
				want["run machine"] = append(want["run machine"], g.GetName())
				want["run gizmo"] = append(want["run gizmo"], g.GetName())
			}
		}
		runs := calls([]*shardChild{r3}, "run")
		for what, names := range want {
			done := firstAfter(runs, what, "", joined)
			for _, name := range names {
				if _, ok := done[name]; !ok {
					return false
				}
			}
		}
		return len(want["run stamp"]) > 0 && len(want["run machine"]) > 0
	})
	t.Logf("r3 ran all four controllers on its share %s after its Lease appeared (%s after it started)",
		took.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	if took > shardBound {
		t.Errorf("r3 took its share %s after joining, want within %s", took.Round(time.Millisecond), shardBound)
	}
	for _, c := range children {
		c.alive(t)
	}
	for what, rec := range map[string]*recorder{"ConfigMaps": cms, "Gizmos": gs} {
		writes := rec.labelWrites()
		if len(writes) != n {
			t.Errorf("%d %s labeled, want %d", len(writes), what, n)
		}
		for name, k := range writes {
			if k != 1 {
				t.Errorf("%s %s: its shard label was written %d times, want once", what, name, k)
				break
			}
		}
	}
	if o := overlaps(calls(children, "run")); len(o) > 0 {
		t.Errorf("%d objects reconciled by two replicas at once, first: %v", len(o), o[:min(5, len(o))])
	}
}

// TestShardingServer: a ring where the API server selects by hash. Sharding
// writes nothing to the objects; reconciles, finalizers and OnDelete of
// an object never overlap between replicas; every move runs no cleanup,
// and every deletion runs it once. On a release without the feature
// (before 1.36) the ring finds that the server does not select by hash
// and falls back to label mode: each object labeled once.
func TestShardingServer(t *testing.T) {
	e, gated := gatedEnv(t)
	const n = 600
	rec, children, ns := testDeaths(t, e, !gated, "stamp,finalizer", n)
	mode, labeled := "server", 0
	if !gated {
		mode, labeled = "labels", n
	}
	if got := mustLease(t, e, ns, "r2").Annotations[shard.ModeAnnotation]; !strings.HasPrefix(got, mode) {
		t.Fatalf("the ring runs in mode %q, want %s", got, mode)
	}
	if got := len(rec.labelWrites()); got != labeled {
		t.Errorf("%d objects got a shard label, want %d", got, labeled)
	}
	testCleanup(t, e, ns, children, n)
}

func mustLease(t *testing.T, e *ctrltest.Env, ns, id string) *coordinationv1.Lease {
	t.Helper()
	l := ringLeases(t, kubernetes.NewForConfigOrDie(e.Config()), ns)[id]
	if l == nil {
		t.Fatalf("no Lease of %s", id)
	}
	return l
}

// testCleanup checks that no move finalized an object or ran its OnDelete,
// then deletes every object and checks that each deletion ran both once,
// on one replica, with no overlap with any reconcile.
func testCleanup(t *testing.T, e *ctrltest.Env, ns string, children []*shardChild, n int) {
	t.Helper()
	for _, what := range []string{"finalize", "ondelete"} {
		if c := calls(children, what); len(c) > 0 {
			t.Fatalf("%d %s calls before any deletion, first %v", len(c), what, c[0])
		}
	}
	cs := kubernetes.NewForConfigOrDie(e.Config())
	must(t, cs.CoreV1().ConfigMaps(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}))
	eventually(t, time.Minute, "every object is finalized and gone", func() bool {
		l, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
	eventually(t, 30*time.Second, "OnDelete ran for every object", func() bool {
		return len(calls(children, "ondelete")) >= n
	})
	for _, what := range []string{"finalize", "ondelete"} {
		count := map[string]int{}
		for _, c := range calls(children, what) {
			count[c.name]++
		}
		if len(count) != n {
			t.Errorf("%s ran for %d objects, want %d", what, len(count), n)
		}
		for name, k := range count {
			if k != 1 {
				t.Errorf("%s ran %d times for %s, want once", what, k, name)
			}
		}
	}
	all := append(calls(children, "run"), calls(children, "finalize")...)
	all = append(all, calls(children, "ondelete")...)
	if o := overlaps(all); len(o) > 0 {
		t.Errorf("%d objects acted on by two replicas at once, first: %v", len(o), o[:min(5, len(o))])
	}
}

// TestShardingPausedReplica pauses a replica (SIGSTOP) for twice the lease
// duration while it writes continuously, with patches that carry no
// precondition. The other replica takes its share once its Lease has
// expired; the paused one, resumed (SIGCONT), never writes again (counted
// on the server), stops counting itself a member, and exits.
func TestShardingPausedReplica(t *testing.T) {
	ns := namespaceIn(t, env.Config())
	cs := kubernetes.NewForConfigOrDie(env.Config())
	createConfigMapsIn(t, cs, ns, "obj", 40)
	_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel-0"}}, metav1.CreateOptions{})
	must(t, err)
	w := watchWrites(t, cs, ns)
	r1 := startShardChild(t, env, ns, "r1", "stamp,writer")
	r2 := startShardChild(t, env, ns, "r2", "stamp,writer")
	eventually(t, time.Minute, "both replicas write", func() bool {
		return len(w.by("r1", 0, 1<<62)) > 40 && len(w.by("r2", 0, 1<<62)) > 40
	})

	r1.mu.Lock()
	r1.killed = true // it is to exit once resumed
	r1.mu.Unlock()
	must(t, r1.cmd.Process.Signal(syscall.SIGSTOP))
	paused := time.Now()
	took := eventually(t, shardBound+10*time.Second, "r2 serves everything while r1 is paused", func() bool {
		l := ringLeases(t, cs, ns)["r2"]
		return l != nil && shard.Held(l).Equal(shard.All)
	})
	t.Logf("r2 took r1's share %s after r1 was paused (lease %s)", took.Round(time.Millisecond), shardLease)
	if took < shardEarliest {
		t.Errorf("r2 took r1's share %s after the pause, before r1's Lease could expire", took.Round(time.Millisecond))
	}
	startR2 := revision(t, cs, ns)
	eventually(t, 10*time.Second, "r2 writes r1's objects", func() bool { return len(w.by("r2", startR2, 1<<62)) > 40 })
	time.Sleep(time.Until(paused.Add(2 * shardLease))) // the pause the test is about: not a wait for the controller

	resumedAt := revision(t, cs, ns)
	resumed := monoNow()
	must(t, r1.cmd.Process.Signal(syscall.SIGCONT))
	eventually(t, 10*time.Second, "r1 is no member any more", func() bool {
		l := r1.printed("leading")
		return len(l) > 0 && l[len(l)-1][0] == "false"
	})
	l := r1.printed("leading")
	at, _ := strconv.ParseInt(l[len(l)-1][1], 10, 64)
	notMember := time.Duration(at - resumed)
	// How soon is TestPausedLeader's to bound: here what counts is that
	// no write leaves r1.
	t.Logf("after SIGCONT: Leading false after %s; %d writes refused", notMember.Round(time.Microsecond), len(r1.printed("refused")))
	select {
	case err := <-r1.exited:
		r1.exited <- err
	case <-time.After(10 * time.Second):
		t.Fatal("r1 did not exit after losing its membership")
	}
	if s := r1.printed("start"); len(s) == 0 || !strings.Contains(strings.Join(s[0], " "), "leadership lost") {
		t.Errorf("r1's Start returned %v, want an error saying its membership was lost", s)
	}
	flushed := w.flush(t, cs, ns)
	if late := w.by("r1", resumedAt, flushed); len(late) > 0 {
		t.Errorf("r1 wrote %d times after it was resumed, while r2 served its share: %v", len(late), late[:min(5, len(late))])
	}
	if n := len(w.by("r2", startR2, flushed)); n == 0 {
		t.Error("r2 did not write while it served everything")
	}
	r2.alive(t)
}

// TestShardingByNamespace: three replicas, in this process, share twelve
// namespaces whose names differ in their last characters (so their hashes
// share their top bits), where the API server selects by namespace. Each
// namespace is served by one replica: its ConfigMaps are in that
// replica's cache only, and so are the Secrets they own, in the cache
// Owns made, and in a cache made Sharded (as for Watches); the other
// replicas' caches do not hold the namespace. The replicas' shares of all
// the cluster's namespaces differ by one namespace at most. A replica that
// stops cleanly hands its namespaces over at once. Before 1.36 the server
// cannot select: the ring runs in label mode, where the ConfigMaps are
// split as well and the Secrets, related objects, are whole everywhere.
func TestShardingByNamespace(t *testing.T) {
	e, gated := gatedEnv(t)
	mode := "server"
	if !gated { // before 1.36: the ring falls back to label mode
		mode = "labels"
	}
	cs := kubernetes.NewForConfigOrDie(e.Config())
	leaseNS := namespaceIn(t, e.Config())
	const perNS = 10
	var nss []string
	for i := range 12 {
		ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-team-%02d", leaseNS, i)}}, metav1.CreateOptions{})
		must(t, err)
		nss = append(nss, ns.Name)
		for j := range perNS {
			cm, err := cs.CoreV1().ConfigMaps(ns.Name).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("cm-%d", j), Labels: map[string]string{"test": leaseNS}}}, metav1.CreateOptions{})
			must(t, err)
			_, err = cs.CoreV1().Secrets(ns.Name).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("owned-%d", j), OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap",
					Name: cm.Name, UID: cm.UID, Controller: new(true)}}}}, metav1.CreateOptions{})
			must(t, err)
		}
	}
	type member struct {
		mgr     *ctrl.Manager
		c       *ctrl.Controller[*corev1.ConfigMap]
		secrets *ctrl.Client[*corev1.Secret]
		cache   *ctrl.Cache[*corev1.Secret] // Sharded, as for Watches
		stop    func()
		mu      sync.Mutex
		seen    map[string]int // owned Secrets a reconcile listed from the cache, by namespace
	}
	start := func(id string) *member {
		m := &member{seen: map[string]int{}}
		var err error
		m.mgr, err = ctrl.NewManager(ctrl.Options{Config: e.Config(), HealthAddress: "127.0.0.1:0", Sharding: ctrl.Sharding{
			Ring:         "byns",
			LeaseOptions: ctrl.LeaseOptions{Namespace: leaseNS, Identity: id, LeaseDuration: shardLease},
			ByNamespace:  true,
		}})
		must(t, err)
		m.secrets, err = ctrl.NewClient[*corev1.Secret](m.mgr, ctrl.ClientOptions{})
		must(t, err)
		m.c, err = ctrl.NewController(m.mgr, "owner", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			owned, err := m.secrets.List(ctx, ctrl.ListParams{Namespace: cm.Namespace})
			if err != nil {
				return ctrl.Result{}, err
			}
			m.mu.Lock()
			m.seen[cm.Namespace] = len(owned)
			m.mu.Unlock()
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"test": leaseNS})}})
		must(t, err)
		_, err = ctrl.Owns[*corev1.Secret](m.c)
		must(t, err)
		m.cache, err = ctrl.NewCache[*corev1.Secret](m.mgr, ctrl.CacheOptions{Sharded: true})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.mgr.Start(ctx) }()
		var once sync.Once
		m.stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("%s: Start: %v", id, err)
				}
			})
		}
		t.Cleanup(m.stop)
		return m
	}
	members := map[string]*member{"a": start("a"), "b": start("b"), "c": start("c")}
	// check waits until each namespace is served by exactly one of live:
	// its ConfigMaps in that replica's cache and no other's, its owned
	// Secrets listed by a reconcile there, and no other replica's client
	// able to read the namespace from a cache.
	check := func(live ...string) time.Duration {
		var why string // the last reason the namespaces were not yet shared
		defer func() {
			if t.Failed() {
				t.Logf("last state: %s", why)
			}
		}()
		return eventually(t, time.Minute, fmt.Sprintf("%v share the namespaces", live), func() bool {
			for _, ns := range nss {
				owners := 0
				for _, id := range live {
					m := members[id]
					n := len(m.c.Cache().List(ns, nil))
					secrets := len(m.cache.List(ns, nil))
					_, err := m.secrets.List(context.Background(), ctrl.ListParams{Namespace: ns})
					m.mu.Lock()
					seen := m.seen[ns]
					m.mu.Unlock()
					// In label mode (before 1.36) the Secrets are whole on
					// every replica: only where the server selects are
					// related caches split by namespace.
					switch {
					case n == perNS && seen == perNS && (!gated || secrets == perNS && err == nil):
						owners++
					case n != 0 || gated && (secrets != 0 || err == nil):
						why = fmt.Sprintf("%s: %s holds %d ConfigMaps and %d Secrets, a reconcile listed %d, its client's list: %v", ns, id, n, secrets, seen, err)
						return false
					}
				}
				if owners != 1 {
					why = fmt.Sprintf("%s: served by %d replicas", ns, owners)
					return false
				}
			}
			// Fair shares are of every namespace in the cluster, those
			// of other tests too: how these twelve fall is chance (one
			// replica may get none), so fairness is checked on the
			// shares (fair below).
			return true
		})
	}
	// fair waits until the shares of live differ by one namespace at
	// most: each serves n/len(live) of the cluster's n namespaces,
	// rounded down or up.
	fair := func(live ...string) {
		var why string
		defer func() {
			if t.Failed() {
				t.Logf("last state: %s", why)
			}
		}()
		eventually(t, time.Minute, fmt.Sprintf("%v hold fair shares", live), func() bool {
			list, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
			must(t, err)
			n := float64(len(list.Items))
			lo, hi := math.Floor(n/float64(len(live))), math.Ceil(n/float64(len(live)))
			var units []float64
			for _, id := range live {
				units = append(units, math.Round(n*gauge(t, members[id].mgr.Registry(), `ctrl_shard_share{ring="byns"}`)))
			}
			why = fmt.Sprintf("%v of %v namespaces", units, n)
			for _, u := range units {
				if u < lo || u > hi {
					return false
				}
			}
			return true
		})
		t.Logf("%v serve %s", live, why)
	}
	took := check("a", "b", "c")
	t.Logf("three replicas share twelve namespaces, %s after they started", took.Round(time.Millisecond))
	fair("a", "b", "c")
	for _, id := range []string{"a", "b", "c"} {
		share := gauge(t, members[id].mgr.Registry(), `ctrl_shard_share{ring="byns"}`)
		inMode := gauge(t, members[id].mgr.Registry(), `ctrl_shard_mode{mode="`+mode+`",ring="byns"}`)
		t.Logf("%s serves %.3f of the space, mode %s %v", id, share, mode, inMode)
		if inMode != 1 {
			t.Errorf("%s: ctrl_shard_mode{mode=%s} = %v, want 1", id, mode, inMode)
		}
		if body := scrape(t, "http://"+members[id].mgr.Addresses().Health+"/readyz"); !strings.Contains(body, "ring byns: mode "+mode+", serving") {
			t.Errorf("%s: /readyz says %q, want a line naming the ring's mode", id, body)
		}
	}
	stopped := time.Now()
	members["c"].stop()
	took = check("a", "b")
	t.Logf("after c stopped cleanly, a and b serve its namespaces %s later", took.Round(time.Millisecond))
	fair("a", "b")
	if took > shardBound-shardLease {
		t.Errorf("c's namespaces moved %s after it stopped, want within %s: a clean stop deletes its Lease",
			time.Since(stopped).Round(time.Millisecond), shardBound-shardLease)
	}
}
