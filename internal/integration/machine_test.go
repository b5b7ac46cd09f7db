package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
)

// Bucket is the custom resource of the state machine tests: its phase,
// conditions and observedGeneration are the machine's.
type Bucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BucketSpec   `json:"spec"`
	Status            BucketStatus `json:"status,omitzero"`
}

// BucketSpec is what the user asks for.
type BucketSpec struct {
	Size int `json:"size"`
}

// BucketStatus is the machine's.
type BucketStatus struct {
	Phase              BucketPhase        `json:"phase,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func (b *Bucket) DeepCopyObject() runtime.Object {
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(b.Status.Conditions)
	return &out
}

// BucketPhase is the state of a Bucket.
type BucketPhase string

const (
	BucketPending      BucketPhase = "Pending"
	BucketProvisioning BucketPhase = "Provisioning"
	BucketReady        BucketPhase = "Ready"
	BucketDeleting     BucketPhase = "Deleting"
	BucketDeleted      BucketPhase = "Deleted"
)

var bucketGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "buckets"}

func init() {
	err := ctrl.Register[*Bucket](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "buckets", Namespaced: true, Status: true})
	if err != nil {
		panic(err)
	}
	// The test binary run as the controller of TestMachineResumesAfterKill,
	// before TestMain starts a control plane of its own.
	if ns := os.Getenv(machineChildEnv); ns != "" {
		os.Exit(runMachineChild(ns))
	}
}

// bucketCRD serves Bucket with the status subresource and a structural
// schema that keeps the machine's fields.
const bucketCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: buckets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Bucket, listKind: BucketList, plural: buckets, singular: bucket}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            properties:
              phase: {type: string}
              observedGeneration: {type: integer}
              conditions:
                type: array
                items:
                  type: object
                  required: [type, status, lastTransitionTime, reason, message]
                  properties:
                    type: {type: string}
                    status: {type: string}
                    observedGeneration: {type: integer}
                    lastTransitionTime: {type: string, format: date-time}
                    reason: {type: string, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'}
                    message: {type: string}
`

var installBucketsOnce = sync.OnceValue(func() error { return env.InstallCRDs([]byte(bucketCRD)) })

type bucketNext = ctrl.Next[BucketPhase]

// bucketMachine is the machine of the tests: Pending, Provisioning (the
// step given), Ready, back to Provisioning on a spec change; Deleting and
// Deleted on deletion. Each move's message holds the size it saw.
func bucketMachine(provision func(context.Context, *Bucket) (bucketNext, error)) ctrl.Machine[*Bucket, BucketPhase] {
	return ctrl.Machine[*Bucket, BucketPhase]{
		Initial: BucketPending,
		States: map[BucketPhase]ctrl.State[*Bucket, BucketPhase]{
			BucketPending: {To: []BucketPhase{BucketProvisioning}, Step: func(_ context.Context, b *Bucket) (bucketNext, error) {
				return bucketNext{To: BucketProvisioning, Reason: "Accepted", Message: fmt.Sprintf("size %d", b.Spec.Size)}, nil
			}},
			BucketProvisioning: {To: []BucketPhase{BucketReady}, Step: provision},
			BucketReady:        {Ready: true, SpecChanged: BucketProvisioning},
			BucketDeleting: {To: []BucketPhase{BucketDeleted}, Step: func(_ context.Context, b *Bucket) (bucketNext, error) {
				return bucketNext{To: BucketDeleted, Reason: "Deprovisioned", Message: fmt.Sprintf("size %d", b.Spec.Size)}, nil
			}},
			BucketDeleted: {},
		},
		Phase:              func(b *Bucket) *BucketPhase { return &b.Status.Phase },
		Conditions:         func(b *Bucket) *[]metav1.Condition { return &b.Status.Conditions },
		ObservedGeneration: func(b *Bucket) *int64 { return &b.Status.ObservedGeneration },
		Finalizer:          "example.com/bucket",
		Deleting:           BucketDeleting,
	}
}

func bucketProvisioned(b *Bucket) bucketNext {
	return bucketNext{To: BucketReady, Reason: "Provisioned", Message: fmt.Sprintf("size %d", b.Spec.Size)}
}

// bucketReasons are the reasons of the moves of bucketMachine.
var bucketReasons = map[string]string{
	"->Pending":              "Created",
	"Pending->Provisioning":  "Accepted",
	"Provisioning->Ready":    "Provisioned",
	"Ready->Provisioning":    "SpecChanged",
	"Pending->Deleting":      "Deleting",
	"Provisioning->Deleting": "Deleting",
	"Ready->Deleting":        "Deleting",
	"Deleting->Deleted":      "Deprovisioned",
}

// outsideBuckets returns a live client of Buckets that no running manager
// tracks: the writes of a user.
func outsideBuckets(t *testing.T) *ctrl.Client[*Bucket] {
	t.Helper()
	must(t, installBucketsOnce())
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config()})
	must(t, err)
	return newClient[*Bucket](t, mgr).Uncached()
}

// bucketMove is one state of a Bucket as a watch reported it: each move the
// server stored.
type bucketMove struct {
	from, to BucketPhase
	cond     metav1.Condition
}

func (s bucketMove) edge() string { return string(s.from) + "->" + string(s.to) }

// event is the message an Event about the move should carry.
func (s bucketMove) event() string {
	if s.from == "" {
		return string(s.to) + ": " + s.cond.Message
	}
	return fmt.Sprintf("%s -> %s: %s", s.from, s.to, s.cond.Message)
}

// bucketWatch records the moves of the Buckets of a namespace from a watch
// of the server, which reports every write: the history of each Bucket's
// phase and condition.
type bucketWatch struct {
	mu      sync.Mutex
	moves   map[string][]bucketMove
	changes map[string]chan BucketPhase // a phase change of the named Bucket, for the test to react to
}

// watchBuckets watches the Buckets of ns until the test ends.
func watchBuckets(t *testing.T, ns string, names ...string) *bucketWatch {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	list, err := dyn.Resource(bucketGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	w, err := dyn.Resource(bucketGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	must(t, err)
	bw := &bucketWatch{moves: map[string][]bucketMove{}, changes: map[string]chan BucketPhase{}}
	for _, n := range names {
		bw.changes[n] = make(chan BucketPhase, 100)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			var b Bucket
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ev.Object.(*unstructured.Unstructured).Object, &b); err != nil {
				t.Errorf("watch: %v", err)
				continue
			}
			bw.observe(&b)
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return bw
}

func (bw *bucketWatch) observe(b *Bucket) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	moves := bw.moves[b.Name]
	var last BucketPhase
	if len(moves) > 0 {
		last = moves[len(moves)-1].to
	}
	if b.Status.Phase == last {
		return
	}
	var cond metav1.Condition
	if c := meta.FindStatusCondition(b.Status.Conditions, "Ready"); c != nil {
		cond = *c
	}
	bw.moves[b.Name] = append(moves, bucketMove{from: last, to: b.Status.Phase, cond: cond})
	if ch := bw.changes[b.Name]; ch != nil {
		ch <- b.Status.Phase
	}
}

func (bw *bucketWatch) history(name string) []bucketMove {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return slices.Clone(bw.moves[name])
}

// checkBucketHistory checks that each move the server stored for the Bucket
// name is declared, with its reason and a condition True only in Ready,
// and that its Events are exactly one per move, in order. It waits for the
// Events, which are sent in the background.
func checkBucketHistory(t *testing.T, bw *bucketWatch, ns, name string) []bucketMove {
	t.Helper()
	moves := bw.history(name)
	var want []string
	for i, m := range moves {
		reason, declared := bucketReasons[m.edge()]
		wantStatus := metav1.ConditionFalse
		if m.to == BucketReady {
			wantStatus = metav1.ConditionTrue
		}
		if !declared || m.cond.Reason != reason || m.cond.Status != wantStatus {
			t.Errorf("%s: move %d, %s: got condition %s %s %q; want a declared move, reason %q, status %s",
				name, i, m.edge(), m.cond.Status, m.cond.Reason, m.cond.Message, reason, wantStatus)
		}
		want = append(want, m.event())
	}
	var got []string
	eventually(t, 30*time.Second, func() error {
		list, err := clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return err
		}
		slices.SortFunc(list.Items, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
		got = got[:0]
		for _, e := range list.Items {
			msg := e.Message
			if e.Count != 1 {
				msg = fmt.Sprintf("%s (%d times)", msg, e.Count)
			}
			got = append(got, msg)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: got Events\n\t%s\nwant one per move the server stored:\n\t%s", name, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		return nil
	})
	return moves
}

// TestMachineConcurrentSpecUpdates changes the spec of Buckets while their
// moves are being made: a step interrupted by a spec change, whose write
// conflicts, and Buckets whose spec changes at every move the server
// stores. No move is lost or written twice: the watch's history of each
// Bucket is a path of declared moves, with an Event for each and no other,
// ending in Ready for the last spec; and deleted, each goes through the
// cleanup path before the server lets it go.
func TestMachineConcurrentSpecUpdates(t *testing.T) {
	ns := newNamespace(t)
	buckets := outsideBuckets(t)
	mgr := newManager(t, ns)

	// The step of "stopped" stops at sizes 1 and 3 until the test has
	// changed the spec: its move then carries a stale resourceVersion.
	stopped := make(chan int)
	resume := make(chan struct{})
	var stops sync.Map // size -> already stopped there
	var mu sync.Mutex
	steps := map[string]int{}
	provision := func(ctx context.Context, b *Bucket) (bucketNext, error) {
		mu.Lock()
		steps[b.Name]++
		mu.Unlock()
		if size := b.Spec.Size; b.Name == "stopped" && (size == 1 || size == 3) {
			if _, again := stops.LoadOrStore(size, true); !again {
				select {
				case stopped <- size:
				case <-ctx.Done():
					return bucketNext{}, ctx.Err()
				}
				select {
				case <-resume:
				case <-ctx.Done():
					return bucketNext{}, ctx.Err()
				}
			}
		}
		return bucketProvisioned(b), nil
	}
	_, err := ctrl.NewMachine(mgr, "bucket", bucketMachine(provision), ctrl.ControllerOptions{Workers: 4})
	must(t, err)
	ctx := start(t, mgr)
	churned := []string{"churn-0", "churn-1", "churn-2"}
	bw := watchBuckets(t, ns, churned...)

	setSize := func(name string, size int) {
		t.Helper()
		_, err := buckets.Patch(ctx, ctrl.Key{Namespace: ns, Name: name}, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, size))
		must(t, err)
	}
	waitStop := func(want int) {
		t.Helper()
		select {
		case got := <-stopped:
			if got != want {
				t.Fatalf("the step stopped at size %d, want %d", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the step did not stop at size %d", want)
		}
	}
	// Each churned Bucket has its spec changed at every move the watch
	// reports, five times, with no pause.
	var churn sync.WaitGroup
	final := map[string]int{"stopped": 4}
	for _, name := range churned {
		final[name] = 6
		changes := bw.changes[name]
		churn.Go(func() {
			for size := 2; size <= 6; size++ {
				select {
				case <-changes:
				case <-time.After(30 * time.Second):
					t.Errorf("%s: no move for 30s", name)
					return
				}
				if _, err := buckets.Patch(ctx, ctrl.Key{Namespace: ns, Name: name}, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, size)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for _, name := range append([]string{"stopped"}, churned...) {
		_, err := buckets.Create(ctx, &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: BucketSpec{Size: 1}})
		must(t, err)
	}

	waitStop(1)
	setSize("stopped", 2) // while the step runs: its move conflicts
	resume <- struct{}{}
	eventually(t, 30*time.Second, func() error { return bucketSettled(ctx, buckets, ns, "stopped", 2) })
	setSize("stopped", 3) // in Ready: back to Provisioning
	waitStop(3)
	setSize("stopped", 4)
	resume <- struct{}{}
	churn.Wait()
	for name, size := range final {
		eventually(t, 30*time.Second, func() error { return bucketSettled(ctx, buckets, ns, name, size) })
	}
	waitIdle(t, mgr)

	for name := range final {
		must(t, buckets.Delete(ctx, ctrl.Key{Namespace: ns, Name: name}, metav1.DeleteOptions{}))
	}
	for name := range final {
		eventually(t, 30*time.Second, func() error {
			if _, err := buckets.Get(ctx, ctrl.Key{Namespace: ns, Name: name}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: got %v, want NotFound once cleaned up", name, err)
			}
			return nil
		})
	}
	waitIdle(t, mgr)
	for name := range final {
		moves := checkBucketHistory(t, bw, ns, name)
		if n := len(moves); n < 2 || moves[n-2].to != BucketDeleting || moves[n-1].to != BucketDeleted {
			t.Errorf("%s: got moves %v, want the cleanup path last", name, moves)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("steps of Provisioning: %v", steps)
	if steps["stopped"] < 3 {
		t.Errorf("stopped: %d runs of Provisioning's step, want at least 3: a conflicting move runs it again", steps["stopped"])
	}
	wantStopped := []string{"->Pending", "Pending->Provisioning", "Provisioning->Ready", "Ready->Provisioning", "Provisioning->Ready", "Ready->Deleting", "Deleting->Deleted"}
	var gotStopped []string
	for _, m := range bw.history("stopped") {
		gotStopped = append(gotStopped, m.edge())
	}
	if !slices.Equal(gotStopped, wantStopped) {
		t.Errorf("stopped: got moves %v, want %v", gotStopped, wantStopped)
	}
}

// bucketSettled says why the Bucket name has not settled in Ready for size, or
// returns nil.
func bucketSettled(ctx context.Context, buckets *ctrl.Client[*Bucket], ns, name string, size int) error {
	b, err := buckets.Get(ctx, ctrl.Key{Namespace: ns, Name: name})
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(b.Status.Conditions, "Ready")
	if b.Status.Phase != BucketReady || b.Spec.Size != size || b.Status.ObservedGeneration != b.Generation ||
		c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != b.Generation || c.Message != fmt.Sprintf("size %d", size) {
		return fmt.Errorf("%s: got phase %s, size %d, generation %d, observed %d, condition %+v; want Ready for size %d at its generation",
			name, b.Status.Phase, b.Spec.Size, b.Generation, b.Status.ObservedGeneration, c, size)
	}
	return nil
}

// TestMachineRefusesUndeclared has a step ask for moves its state does not
// declare: the machine refuses them with a terminal error that names both
// states, in the log and in a Warning Event, writes nothing, and does not
// retry until the object changes.
func TestMachineRefusesUndeclared(t *testing.T) {
	ns := newNamespace(t)
	buckets := outsideBuckets(t)
	var logMu sync.Mutex
	var logs []string
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{})
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, Logger: log})
	must(t, err)
	var mu sync.Mutex
	calls := 0
	_, err = ctrl.NewMachine(mgr, "bucket", bucketMachine(func(_ context.Context, b *Bucket) (bucketNext, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return bucketNext{To: BucketDeleted, Reason: "Shortcut"}, nil
	}), ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	bw := watchBuckets(t, ns)
	key := ctrl.Key{Namespace: ns, Name: "b"}
	_, err = buckets.Create(ctx, &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}, Spec: BucketSpec{Size: 1}})
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls == 0 {
			return fmt.Errorf("Provisioning's step not called")
		}
		return nil
	})
	waitIdle(t, mgr)

	const refusal = "Provisioning -> Deleted is not a declared transition (Provisioning may go to Ready)"
	b, err := buckets.Get(ctx, key)
	must(t, err)
	if b.Status.Phase != BucketProvisioning {
		t.Errorf("got phase %s on the server, want Provisioning", b.Status.Phase)
	}
	mu.Lock()
	if calls != 1 {
		t.Errorf("got %d calls of the step, want 1: a refusal is not retried", calls)
	}
	mu.Unlock()
	logMu.Lock()
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "terminal error: "+refusal) }) {
		t.Errorf("got log lines\n\t%s\nwant one with %q", strings.Join(logs, "\n\t"), refusal)
	}
	logMu.Unlock()
	eventually(t, 30*time.Second, func() error {
		list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=TransitionRefused"})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Type != corev1.EventTypeWarning || list.Items[0].Message != refusal {
			return fmt.Errorf("got TransitionRefused Events %v, want one Warning %q", list.Items, refusal)
		}
		return nil
	})

	// A new spec is a change: the step runs again, and is refused again.
	_, err = buckets.Patch(ctx, key, types.MergePatchType, []byte(`{"spec":{"size":2}}`))
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls != 2 {
			return fmt.Errorf("got %d calls of the step after a spec change, want 2", calls)
		}
		return nil
	})
	waitIdle(t, mgr)
	var edges []string
	for _, m := range bw.history("b") {
		edges = append(edges, m.edge())
	}
	if want := []string{"->Pending", "Pending->Provisioning"}; !slices.Equal(edges, want) {
		t.Errorf("got moves %v, want %v and no further", edges, want)
	}
}

const machineChildEnv = "CTRL_MACHINE_CHILD" // the namespace

// runMachineChild runs bucketMachine in the namespace ns, with a
// Provisioning step that does its work (a ConfigMap), says so on standard
// output, and then never returns: the test kills the process there, between
// the step and the write of its move.
func runMachineChild(ns string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = ctrl.NewMachine(mgr, "bucket", bucketMachine(func(ctx context.Context, b *Bucket) (bucketNext, error) {
		if err := provisionConfigMap(ctx, configMaps, b, "child"); err != nil {
			return bucketNext{}, err
		}
		fmt.Printf("stepped %s\n", b.Name)
		select {} // killed here
	}), ctrl.ControllerOptions{})
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

// provisionConfigMap is the work of Provisioning: a ConfigMap named after
// the Bucket, made once, saying who made it.
func provisionConfigMap(ctx context.Context, configMaps *ctrl.Client[*corev1.ConfigMap], b *Bucket, by string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name + "-bucket"}, Data: map[string]string{"by": by}}
	_, err := configMaps.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// TestMachineResumesAfterKill kills the controller with SIGKILL after a
// step did its work and before its move was written. A new controller
// finds the Bucket in the state the old one left it in, runs that state's
// step again, and writes the move once: the server's history and the Events
// hold each move exactly once.
func TestMachineResumesAfterKill(t *testing.T) {
	ns := newNamespace(t)
	buckets := outsideBuckets(t)
	bw := watchBuckets(t, ns)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), machineChildEnv+"="+ns, "KUBECONFIG="+env.KubeconfigPath())
	out, err := child.StdoutPipe()
	must(t, err)
	child.Stderr = os.Stderr
	must(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(out); s.Scan(); {
			lines <- s.Text()
		}
	}()

	key := ctrl.Key{Namespace: ns, Name: "k"}
	_, err = buckets.Create(context.Background(), &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k"}, Spec: BucketSpec{Size: 1}})
	must(t, err)
	select {
	case l := <-lines:
		if l != "stepped k" {
			t.Fatalf("the child said %q, want stepped k", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("the child did not step Provisioning within a minute")
	}
	// The child's Events are sent in the background: let them land before
	// the kill, so that the Events tell what the machine did.
	eventually(t, 30*time.Second, func() error {
		list, err := clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) < 2 {
			return fmt.Errorf("got %d Events from the child (%v), want 2", len(list.Items), err)
		}
		return nil
	})
	must(t, child.Process.Kill()) // SIGKILL: between the step and its write
	_ = child.Wait()
	for range lines {
	}
	b, err := buckets.Get(context.Background(), key)
	must(t, err)
	if b.Status.Phase != BucketProvisioning {
		t.Fatalf("after the kill: got phase %s on the server, want Provisioning", b.Status.Phase)
	}

	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var mu sync.Mutex
	var steps []BucketPhase
	machine := bucketMachine(func(ctx context.Context, b *Bucket) (bucketNext, error) {
		mu.Lock()
		steps = append(steps, BucketProvisioning)
		mu.Unlock()
		if err := provisionConfigMap(ctx, configMaps, b, "survivor"); err != nil {
			return bucketNext{}, err
		}
		return bucketProvisioned(b), nil
	})
	pending := machine.States[BucketPending]
	next := pending.Step
	pending.Step = func(ctx context.Context, b *Bucket) (bucketNext, error) {
		mu.Lock()
		steps = append(steps, BucketPending)
		mu.Unlock()
		return next(ctx, b)
	}
	machine.States[BucketPending] = pending
	_, err = ctrl.NewMachine(mgr, "bucket", machine, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	b, err = buckets.Get(ctx, key)
	must(t, err)
	if b.Status.Phase != BucketReady {
		t.Errorf("after the restart: got phase %s, want Ready", b.Status.Phase)
	}
	mu.Lock()
	if !slices.Equal(steps, []BucketPhase{BucketProvisioning}) {
		t.Errorf("the new controller ran the steps of %v, want Provisioning's alone", steps)
	}
	mu.Unlock()
	cm, err := configMaps.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: "k-bucket"})
	must(t, err)
	if cm.Data["by"] != "child" {
		t.Errorf("got the ConfigMap made by %q, want the child's, found again by the survivor", cm.Data["by"])
	}
	moves := checkBucketHistory(t, bw, ns, "k")
	var edges []string
	for _, m := range moves {
		edges = append(edges, m.edge())
	}
	if want := []string{"->Pending", "Pending->Provisioning", "Provisioning->Ready"}; !slices.Equal(edges, want) {
		t.Errorf("got moves %v, want %v: each once", edges, want)
	}
}
