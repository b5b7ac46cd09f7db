package production_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
)

const shardChildEnv = "CTRL_PRODUCTION_SHARD_CHILD" // the namespace; the child is replica "r3"

// leaseDuration is the ring's: short, so that a dead replica's objects
// move in seconds, and long enough that a replica renews on a loaded
// machine (its renewals compete with thousands of writes).
const leaseDuration = 5 * time.Second

// ring is the Sharding of the test's replicas.
func ring(identity string) ctrl.Sharding {
	return ctrl.Sharding{Ring: "ring", Identity: identity,
		LeaseDuration: leaseDuration, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond}
}

// interval is one reconcile of one object by one replica.
type interval struct {
	replica    string
	start, end int64 // Unix nanoseconds
}

// audit records every reconcile of every replica.
type audit struct {
	mu   sync.Mutex
	runs map[string][]interval // key -> reconciles
}

func (a *audit) add(key, replica string, start, end int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs[key] = append(a.runs[key], interval{replica, start, end})
}

// overlaps returns the objects two replicas reconciled at overlapping times.
func (a *audit) overlaps() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for key, runs := range a.runs {
		slices.SortFunc(runs, func(x, y interval) int { return int(x.start - y.start) })
		for i := 1; i < len(runs); i++ {
			if runs[i].replica != runs[i-1].replica && runs[i].start < runs[i-1].end {
				out = append(out, fmt.Sprintf("%s: %s and %s", key, runs[i-1].replica, runs[i].replica))
			}
		}
	}
	return out
}

// shardReconciler stamps each object with the replica that owns it, the
// first time that replica reconciles it, and reports every reconcile.
func shardReconciler(replica string, cms *ctrl.Client[*corev1.ConfigMap], report func(key string, start, end int64)) func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
	var seq atomic.Int64
	return func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		start := time.Now().UnixNano()
		defer func() { report(cm.Name, start, time.Now().UnixNano()) }()
		if owner, _, _ := strings.Cut(cm.Annotations["owner"], "-"); owner == replica {
			return ctrl.Result{}, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"owner":"%s-%d"}}}`, replica, seq.Add(1))
		_, err := cms.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch))
		return ctrl.Result{}, err
	}
}

func newShardReplica(t *testing.T, cfg func() (*ctrl.Manager, error), replica string, report func(string, int64, int64)) (*ctrl.Manager, *ctrl.Controller[*corev1.ConfigMap]) {
	t.Helper()
	mgr, err := cfg()
	must(t, err)
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	c, err := ctrl.NewController(mgr, "stamp", shardReconciler(replica, cms, report), ctrl.ControllerOptions{Workers: 8})
	must(t, err)
	return mgr, c
}

// runShardChild is replica r3 in a process of its own, so that the test
// can kill it: it prints "run <key> <start> <end>" per reconcile.
func runShardChild() int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns := os.Getenv(shardChildEnv)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, Sharding: ring("r3")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	report := func(key string, start, end int64) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "run %s %d %d\n", key, start, end)
		out.Flush()
	}
	if _, err := ctrl.NewController(mgr, "stamp", shardReconciler("r3", cms, report), ctrl.ControllerOptions{Workers: 8}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := mgr.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestSharding runs three replicas of a sharded controller over 3,000
// ConfigMaps, one of them in a child process. Each caches and reconciles
// about a third. The child is killed with SIGKILL: the other two take its
// objects within the lease duration and a few seconds. A fourth replica
// joins and takes its share. Throughout, no object is reconciled by two
// replicas at overlapping times, and at the end every object has a live
// owner.
func TestSharding(t *testing.T) {
	const n = 3000
	ns := namespace(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config())
	for i := range n {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}}, metav1.CreateOptions{})
		must(t, err)
	}
	au := &audit{runs: map[string][]interval{}}
	newMgr := func(id string) func() (*ctrl.Manager, error) {
		return func() (*ctrl.Manager, error) {
			return ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, Sharding: ring(id)})
		}
	}
	report := func(replica string) func(string, int64, int64) {
		return func(key string, start, end int64) { au.add(key, replica, start, end) }
	}
	runMgr := func(mgr *ctrl.Manager) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		})
	}
	m1, c1 := newShardReplica(t, newMgr("r1"), "r1", report("r1"))
	m2, c2 := newShardReplica(t, newMgr("r2"), "r2", report("r2"))
	runMgr(m1)
	runMgr(m2)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), shardChildEnv+"="+ns, "KUBECONFIG="+env.KubeconfigPath())
	out, err := child.StdoutPipe()
	must(t, err)
	child.Stderr = os.Stderr
	must(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	childDone := make(chan struct{})
	go func() {
		defer close(childDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 4 && f[0] == "run" {
				start, _ := strconv.ParseInt(f[2], 10, 64)
				end, _ := strconv.ParseInt(f[3], 10, 64)
				au.add(f[1], "r3", start, end)
			}
		}
	}()

	owners := func() (map[string]int, error) {
		list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		counts := map[string]int{}
		for _, cm := range list.Items {
			owner, _, _ := strings.Cut(cm.Annotations["owner"], "-")
			if label := cm.Labels["shard.ctrl.dev/ring"]; label != owner {
				owner = "moving"
			}
			counts[owner]++
		}
		return counts, nil
	}
	ownedBy := func(want ...string) func() bool {
		return func() bool {
			counts, err := owners()
			if err != nil {
				return false
			}
			total := 0
			for _, r := range want {
				if counts[r] < n/len(want)*7/10 { // about a share each
					return false
				}
				total += counts[r]
			}
			return total == n
		}
	}
	took := eventually(t, 2*time.Minute, "r1, r2 and r3 share the objects", ownedBy("r1", "r2", "r3"))
	counts, _ := owners()
	t.Logf("three replicas own %v, %s after the start", counts, took.Round(time.Millisecond))
	for i, c := range []*ctrl.Controller[*corev1.ConfigMap]{c1, c2} {
		if got := len(c.Cache().List(ns, nil)); got < n/3*7/10 || got > n/3*13/10 {
			t.Errorf("replica r%d caches %d ConfigMaps, want about %d", i+1, got, n/3)
		}
	}

	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	var r3 []string
	for _, cm := range list.Items {
		if cm.Labels["shard.ctrl.dev/ring"] == "r3" {
			r3 = append(r3, cm.Name)
		}
	}
	must(t, child.Process.Kill()) // SIGKILL: its Lease is not released
	killed := time.Now().UnixNano()
	<-childDone
	// Each of r3's objects is reconciled by another replica: when was the
	// last of them?
	var last int64
	eventually(t, 30*time.Second, "r1 and r2 reconcile r3's objects", func() bool {
		au.mu.Lock()
		defer au.mu.Unlock()
		last = 0
		for _, key := range r3 {
			first := int64(0)
			for _, run := range au.runs[key] {
				if run.replica != "r3" && run.start > killed && (first == 0 || run.start < first) {
					first = run.start
				}
			}
			if first == 0 {
				return false
			}
			last = max(last, first)
		}
		return true
	})
	took = time.Duration(last - killed)
	t.Logf("the last of r3's %d objects was reconciled by another replica %s after r3 was killed (lease duration %s)", len(r3), took.Round(time.Millisecond), leaseDuration)
	if took > leaseDuration+5*time.Second {
		t.Errorf("r3's objects were reconciled by the others %s after its death, want within the lease duration and 5s", took.Round(time.Millisecond))
	}
	eventually(t, time.Minute, "r1 and r2 own every object", ownedBy("r1", "r2"))

	m4, c4 := newShardReplica(t, newMgr("r4"), "r4", report("r4"))
	runMgr(m4)
	took = eventually(t, 2*time.Minute, "r4 takes its share", ownedBy("r1", "r2", "r4"))
	counts, _ = owners()
	t.Logf("after r4 joined: %v, %s after it started", counts, took.Round(time.Millisecond))
	if got := len(c4.Cache().List(ns, nil)); got < n/3*7/10 {
		t.Errorf("r4 caches %d ConfigMaps, want about %d", got, n/3)
	}
	// The sharder, one of the replicas, counts the objects of each owner.
	eventually(t, 30*time.Second, "ctrl_shard_objects counts every object", func() bool {
		total := 0.0
		for _, m := range []*ctrl.Manager{m1, m2, m4} {
			for _, r := range []string{"r1", "r2", "r4"} {
				total += gauge(t, m.Registry(), `ctrl_shard_objects{replica="`+r+`",ring="ring"}`)
			}
		}
		return total == n
	})
	if o := au.overlaps(); len(o) > 0 {
		t.Errorf("%d objects reconciled by two replicas at once, first: %v", len(o), o[:min(5, len(o))])
	}
}
