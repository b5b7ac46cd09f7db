//go:build linux

package production_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
)

// The pause test's replicas set only LeaseDuration: the renew deadline
// and the retry period follow it (2 s and 400 ms).
const (
	pauseLease   = 3 * time.Second
	pauseRenew   = pauseLease * 10 / 15
	pauseRetry   = pauseLease * 2 / 15
	pauseObjects = 8
	// pauseWork is how long each reconcile works before it writes: with
	// every worker busy this long, reconciles are in flight whenever the
	// leader is paused.
	pauseWork = 300 * time.Millisecond
)

const (
	pauseChildEnv   = "CTRL_PRODUCTION_PAUSE_CHILD"   // the namespace
	pauseIdentity   = "CTRL_PRODUCTION_PAUSE_ID"      // the replica's identity
	pauseStandbyEnv = "CTRL_PRODUCTION_PAUSE_STANDBY" // "true": StandbyOnLoss
)

// Annotations each replica stamps on every object it writes.
const (
	writerAnnotation = "ctrl.test/writer"
	seqAnnotation    = "ctrl.test/seq"
)

// init runs the replica when the test binary is started as one, before
// TestMain connects to anything.
func init() {
	if os.Getenv(pauseChildEnv) != "" {
		os.Exit(runPauseChild())
	}
}

// monoNow reads CLOCK_MONOTONIC, which every process on the machine shares
// and which runs on while a process is stopped: a moment this process
// stamps can be compared with one the test stamped.
func monoNow() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

// runPauseChild is a replica that writes continuously while it leads: each
// reconcile works for pauseWork, or until its context is canceled, then
// stamps its identity and a sequence number on the object with a patch
// that carries no precondition, so that only the replica's own deadline
// keeps it from writing once another leads. The reconciles of the objects
// named long-* work until they are canceled, so that some are in flight
// whenever the replica is paused, with no timer of their own to wake them. It prints "leading <bool>
// <mono>" when Leading changes, and "ended <mono> <how>" for every
// reconcile that ended because leadership ended.
func runPauseChild() int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns, id := os.Getenv(pauseChildEnv), os.Getenv(pauseIdentity)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, LeaderElection: ctrl.LeaderElection{
		Name:          "pause",
		LeaseOptions:  ctrl.LeaseOptions{Identity: id, LeaseDuration: pauseLease},
		StandbyOnLoss: os.Getenv(pauseStandbyEnv) == "true",
	}})
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
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	var seq int64
	var seqMu sync.Mutex
	c, err := ctrl.NewController(mgr, "pause", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		if strings.HasPrefix(cm.Name, "sentinel") {
			return ctrl.Result{}, nil
		}
		work := time.NewTimer(pauseWork)
		if strings.HasPrefix(cm.Name, "long") {
			work.Reset(time.Hour) // ends only when canceled
		}
		defer work.Stop()
		select {
		case <-ctx.Done():
			say("ended %d canceled", monoNow())
			return ctrl.Result{}, ctx.Err()
		case <-work.C:
		}
		seqMu.Lock()
		seq++
		n := seq
		seqMu.Unlock()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"%d"}}}`, writerAnnotation, id, seqAnnotation, n)
		if _, err := cms.Patch(ctx, ctrl.KeyOf(cm), types.MergePatchType, []byte(patch)); err != nil {
			if errors.Is(err, ctrl.ErrLeadershipLost) {
				say("ended %d refused", monoNow())
			}
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
	}, ctrl.ControllerOptions{Workers: 6})
	if err == nil {
		// Only RequeueAfter paces the writes, not their own updates.
		err = c.FilterUpdates(func(old, obj *corev1.ConfigMap) bool { return false })
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
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

// pauseChild is a replica process and what it printed.
type pauseChild struct {
	id     string
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan error
}

func startPauseChild(t *testing.T, ns, id string, standby bool) *pauseChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pauseChildEnv+"="+ns, pauseIdentity+"="+id,
		pauseStandbyEnv+"="+strconv.FormatBool(standby), "KUBECONFIG="+env.KubeconfigPath())
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	c := &pauseChild{id: id, cmd: cmd, exited: make(chan error, 1)}
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
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.exited
		c.exited <- nil
	})
	return c
}

// printed returns the fields of the lines the child printed that start
// with prefix.
func (c *pauseChild) printed(prefix string) [][]string {
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

// write is one write of an object, as a watch saw it on the server.
type write struct {
	rv     int64 // etcd's revision: comparable in this test, opaque in general
	name   string
	writer string
	seq    string
}

// writes records every change to the ConfigMaps of a namespace.
type writes struct {
	mu  sync.Mutex
	all []write
}

// watchWrites watches ns from now until the test ends.
func watchWrites(t *testing.T, cs kubernetes.Interface, ns string) *writes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	w := &writes{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			wi, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				time.Sleep(100 * time.Millisecond) // before asking the server again
				continue
			}
			for ev := range wi.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || ev.Type == watch.Bookmark {
					continue
				}
				rv = cm.ResourceVersion
				n, _ := strconv.ParseInt(rv, 10, 64)
				w.mu.Lock()
				w.all = append(w.all, write{n, cm.Name, cm.Annotations[writerAnnotation], cm.Annotations[seqAnnotation]})
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// by returns the writes stamped by writer with a revision in (after, before].
func (w *writes) by(writer string, after, before int64) []write {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []write
	for _, x := range w.all {
		if x.writer == writer && x.rv > after && x.rv <= before {
			out = append(out, x)
		}
	}
	return out
}

// flush writes the sentinel ConfigMap and waits until the watch has seen
// it, so that it has seen every write the server made before; it returns
// the sentinel's revision.
func (w *writes) flush(t *testing.T, cs kubernetes.Interface, ns string) int64 {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), "sentinel-0", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"data":{"at":"%d"}}`, monoNow())), metav1.PatchOptions{})
	must(t, err)
	rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	eventually(t, 10*time.Second, "the watch sees the sentinel", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.all) > 0 && w.all[len(w.all)-1].rv >= rv
	})
	return rv
}

// revision returns the server's current revision, by a quorum list.
func revision(t *testing.T, cs kubernetes.Interface, ns string) int64 {
	t.Helper()
	l, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{Limit: 1})
	must(t, err)
	rv, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	return rv
}

// TestPausedLeader pauses the leader (SIGSTOP) for twice the lease
// duration while the standby takes over, then resumes it (SIGCONT). The
// resumed replica must not write again (counted on the server, from the
// stamps on every write), and its reconciles in flight must end, canceled
// or refused, within pauseCancelBound of the resume. With StandbyOnLoss it
// stays up and leads again after the other replica is killed -9, within
// the bound a takeover after a crash has.
func TestPausedLeader(t *testing.T) {
	for _, standby := range []bool{false, true} {
		t.Run(map[bool]string{false: "exit", true: "standby"}[standby], func(t *testing.T) {
			testPausedLeader(t, standby)
		})
	}
}

// pauseCancelBound is how soon after SIGCONT every reconcile of the
// resumed replica has ended. Ending them takes no request and no timer
// that has not already expired: the process needs the CPU for a few
// goroutine switches (the deadline's timer, the elector, the manager, each
// reconcile). The bound is what a process that just woke waits for a core
// when two CPU-bound processes and the control plane share two cores:
// a few scheduler periods (Linux's default latency target is 6 ms times
// 1 + log2(cores), 12 ms here), with room for a garbage collection.
const pauseCancelBound = 100 * time.Millisecond

func testPausedLeader(t *testing.T, standby bool) {
	ns := namespace(t)
	cs := kubernetes.NewForConfigOrDie(env.Config())
	createConfigMaps(t, ns, "obj", pauseObjects)
	createConfigMaps(t, ns, "long", 2) // each takes a worker until canceled
	createConfigMaps(t, ns, "sentinel", 1)
	w := watchWrites(t, cs, ns)

	a := startPauseChild(t, ns, "a", standby)
	eventually(t, 30*time.Second, "a leads", func() bool { return holder(t, ns, "pause") == "a" })
	b := startPauseChild(t, ns, "b", standby)
	eventually(t, 30*time.Second, "b is up", func() bool { return len(b.printed("identity")) > 0 })
	eventually(t, 10*time.Second, "a writes", func() bool { return len(w.by("a", 0, 1<<62)) >= 2*pauseObjects })

	must(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	paused := time.Now()
	took := eventually(t, pauseLease+5*time.Second, "b leads while a is paused", func() bool { return holder(t, ns, "pause") == "b" })
	t.Logf("b took over %s after a was paused (lease duration %s)", took.Round(time.Millisecond), pauseLease)
	startB := revision(t, cs, ns)
	eventually(t, 10*time.Second, "b writes", func() bool { return len(w.by("b", startB, 1<<62)) > 0 })
	time.Sleep(time.Until(paused.Add(2 * pauseLease))) // the pause the test is about: not a wait for the controller

	// Every write a made before its pause is at or below resumedAt; resumed
	// is a lower bound of the moment a runs again, so the latencies below
	// are upper bounds.
	resumedAt := revision(t, cs, ns)
	resumed := monoNow()
	must(t, a.cmd.Process.Signal(syscall.SIGCONT))
	sent := time.Duration(monoNow() - resumed)

	// a notices at once: its reconciles end, and Leading turns false.
	eventually(t, 10*time.Second, "a stops leading", func() bool {
		l := a.printed("leading")
		return len(l) > 0 && l[len(l)-1][0] == "false"
	})
	ended := a.printed("ended")
	if count(ended, "canceled") < 2 {
		t.Fatalf("got %v, want the two long reconciles canceled at least", ended)
	}
	var last time.Duration
	for _, e := range ended {
		at, _ := strconv.ParseInt(e[0], 10, 64)
		d := time.Duration(at - resumed)
		if d < 0 {
			t.Errorf("a reconcile ended %s before the resume: %v", -d, e)
		}
		last = max(last, d)
	}
	l := a.printed("leading")
	at, _ := strconv.ParseInt(l[len(l)-1][1], 10, 64)
	notLeading := time.Duration(at - resumed)
	t.Logf("after SIGCONT (sent in %s): %d reconciles in flight ended (%d canceled, %d refused a write) within %s; Leading false after %s",
		sent.Round(time.Microsecond), len(ended), count(ended, "canceled"), count(ended, "refused"), last.Round(time.Microsecond), notLeading.Round(time.Microsecond))
	if last > pauseCancelBound || notLeading > pauseCancelBound {
		t.Errorf("a's reconciles ended %s and Leading turned false %s after the resume, want within %s", last, notLeading, pauseCancelBound)
	}

	if !standby {
		select {
		case err := <-a.exited:
			a.exited <- err
		case <-time.After(10 * time.Second):
			t.Fatal("a did not exit after losing the lease")
		}
		if s := a.printed("start"); len(s) == 0 || !strings.Contains(strings.Join(s[0], " "), "leadership lost") {
			t.Errorf("a's Start returned %v, want an error saying leadership was lost", s)
		}
	} else {
		// Standing by, a must stay out for as long as b leads: give it
		// several retry periods to misbehave.
		time.Sleep(5 * pauseRetry) // watching for writes that must not come
	}
	flushed := w.flush(t, cs, ns)
	if late := w.by("a", resumedAt, flushed); len(late) > 0 {
		t.Errorf("a wrote %d times after it was resumed, while b led: %v", len(late), late)
	}
	if n := len(w.by("b", startB, flushed)); n == 0 {
		t.Error("b did not write while it led")
	}
	if !standby {
		return
	}

	// Kill b: a, standing by, takes over within the lease duration, the
	// two retry periods (with jitter) it can take to see b's last renewal
	// and then to find it expired, and a margin of a second for requests
	// and scheduling on a loaded machine.
	killedAt := revision(t, cs, ns)
	must(t, b.cmd.Process.Kill())
	bound := pauseLease + 2*time.Duration(1.2*float64(pauseRetry)) + time.Second
	took = eventually(t, bound+10*time.Second, "a leads again after b was killed", func() bool { return holder(t, ns, "pause") == "a" })
	t.Logf("a took over %s after b was killed -9 (bound %s)", took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("takeover after kill -9 took %s, want within %s", took, bound)
	}
	if took < pauseLease-2*pauseRetry {
		t.Errorf("took over %s after the kill, before b's lease could expire", took)
	}
	eventually(t, 10*time.Second, "a writes again", func() bool { return len(w.by("a", killedAt, 1<<62)) > 0 })
}

func count(lines [][]string, how string) int {
	n := 0
	for _, l := range lines {
		if len(l) > 1 && l[1] == how {
			n++
		}
	}
	return n
}
