package production_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
)

// Short durations, so that takeovers happen in seconds.
func election(name, identity string) ctrl.LeaderElection {
	return ctrl.LeaderElection{
		Name:         name,
		LeaseOptions: ctrl.LeaseOptions{Identity: identity, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond},
	}
}

// tracker records which replica reconciles which key, and fails the test if
// two replicas reconcile one key at the same time.
type tracker struct {
	t        *testing.T
	mu       sync.Mutex
	inFlight map[string]string // key -> replica
	counts   map[string]int    // replica -> reconciles
}

func newTracker(t *testing.T) *tracker {
	return &tracker{t: t, inFlight: map[string]string{}, counts: map[string]int{}}
}

func (tr *tracker) reconciler(replica string) func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
	return func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		key := ctrl.KeyOf(cm).String()
		tr.mu.Lock()
		if other, ok := tr.inFlight[key]; ok {
			tr.t.Errorf("%s reconciled by %s and %s at once", key, other, replica)
		}
		tr.inFlight[key] = replica
		tr.counts[replica]++
		tr.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // a reconcile that takes a while, to make overlaps visible
		tr.mu.Lock()
		delete(tr.inFlight, key)
		tr.mu.Unlock()
		return ctrl.Result{}, nil
	}
}

func (tr *tracker) count(replica string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.counts[replica]
}

type replica struct {
	mgr    *ctrl.Manager
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, ns, lease, id string, tr *tracker) *replica {
	t.Helper()
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, LeaderElection: election(lease, id)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.NewController(mgr, "replica", tr.reconciler(id), ctrl.ControllerOptions{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{mgr: mgr, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

func holder(t *testing.T, ns, lease string) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config())
	l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// eventually polls cond every 50 ms until it holds or timeout passes, and
// returns how long it took.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not true after %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling the server
	}
	return time.Since(start)
}

func createConfigMaps(t *testing.T, ns, prefix string, n int) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config())
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLeaderElectionHandover(t *testing.T) {
	ns := namespace(t)
	tr := newTracker(t)
	a := startReplica(t, ns, "handover", "a", tr)
	eventually(t, 10*time.Second, "a leads", func() bool { return holder(t, ns, "handover") == "a" })
	b := startReplica(t, ns, "handover", "b", tr)

	createConfigMaps(t, ns, "first", 20)
	eventually(t, 10*time.Second, "a reconciles all", func() bool { return tr.count("a") >= 20 })
	if tr.count("b") != 0 {
		t.Errorf("the follower reconciled %d times, want 0", tr.count("b"))
	}
	// The follower's cache is warm.
	bClient, err := ctrl.NewClient[*corev1.ConfigMap](b.mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := bClient.List(context.Background(), ctrl.ListParams{Namespace: ns}); err != nil || len(list) != 20 {
		t.Errorf("follower cache: got %d objects (%v), want 20", len(list), err)
	}

	// A clean stop releases the Lease: b takes over without waiting for it
	// to expire, and reconciles what changed meanwhile.
	// b may take the Lease as soon as a releases it: a watch sees the
	// release however soon that is.
	cs := kubernetes.NewForConfigOrDie(env.Config())
	w, err := cs.CoordinationV1().Leases(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=handover"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	stopped := time.Now()
	a.stop(t)
	eventually(t, 5*time.Second, "b leads", func() bool { return holder(t, ns, "handover") == "b" })
	var holders []string
	for released := false; !released; {
		select {
		case ev := <-w.ResultChan():
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				t.Fatalf("watching the Lease: %v", ev.Object)
			}
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			holders = append(holders, h)
			released = h == ""
		case <-time.After(5 * time.Second):
			t.Fatalf("after a clean stop: the Lease's holders were %q, want it released before b took it", holders)
		}
	}
	createConfigMaps(t, ns, "second", 5)
	eventually(t, 10*time.Second, "b reconciles", func() bool { return tr.count("b") >= 5 })
	t.Logf("takeover after a clean stop: %s", time.Since(stopped).Round(time.Millisecond))
}

const (
	childEnv      = "CTRL_PRODUCTION_CHILD" // the namespace
	childLeaseEnv = "CTRL_PRODUCTION_LEASE" // the Lease; default "killed"
)

// runChild is a replica in its own process, so that a test can kill it. It
// prints a line per reconcile and per OnDelete call.
func runChild() int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns, lease := os.Getenv(childEnv), os.Getenv(childLeaseEnv)
	if lease == "" {
		lease = "killed"
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, LeaderElection: election(lease, "child")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := ctrl.NewController(mgr, "child", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		fmt.Printf("reconciled %s\n", cm.Name)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err == nil {
		err = c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
			fmt.Printf("deleted %s\n", cm.Name)
			return nil
		})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := mgr.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChild runs runChild in a new process for the Lease lease in ns, and
// returns its output lines. The test's cleanup kills it.
func startChild(t *testing.T, ns, lease string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+ns, childLeaseEnv+"="+lease, "KUBECONFIG="+env.KubeconfigPath())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	return child, bufio.NewScanner(out)
}

func TestLeaderElectionKilled(t *testing.T) {
	ns := namespace(t)
	createConfigMaps(t, ns, "x", 3)
	child, lines := startChild(t, ns, "killed")
	for seen := 0; seen < 3 && lines.Scan(); {
		if strings.HasPrefix(lines.Text(), "reconciled ") {
			seen++
		}
	}
	if h := holder(t, ns, "killed"); h != "child" {
		t.Fatalf("got holder %q, want child", h)
	}

	tr := newTracker(t)
	startReplica(t, ns, "killed", "survivor", tr)
	// The survivor waits: the child still holds the Lease.
	if err := child.Process.Kill(); err != nil { // SIGKILL: no release
		t.Fatal(err)
	}
	killed := time.Now()
	took := eventually(t, 3*time.Second+5*time.Second, "the survivor leads", func() bool { return holder(t, ns, "killed") == "survivor" })
	eventually(t, 10*time.Second, "the survivor reconciles", func() bool { return tr.count("survivor") >= 3 })
	t.Logf("takeover after SIGKILL: %s (lease duration 3s)", took.Round(time.Millisecond))
	if took < 2*time.Second {
		t.Errorf("took over %s after the kill, before the 3s lease could expire", took)
	}
	_ = killed
	var _ coordinationv1.Lease
}
