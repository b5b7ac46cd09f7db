package ctrl_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/internal/shard"
)

// TestShardMoveIsNoRemoval runs one replica of a ring on the fakes (label
// mode: the fakes cannot select by hash) with a controller that owns a
// finalizer, has OnDelete and filters updates to generation changes. A
// second member's Lease appears: the replica gives up that member's share,
// and the objects in it leave its cache as moves, running neither hook and
// keeping the finalizer. The Lease goes: the replica takes the share back
// and reconciles its objects again, although no update of theirs passes
// the filter. A deletion then runs OnDelete once.
func TestShardMoveIsNoRemoval(t *testing.T) {
	const n = 40
	var objs []*corev1.ConfigMap
	var seed []runtime.Object
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default",
			Name: fmt.Sprintf("cm-%02d", i), UID: types.UID(fmt.Sprintf("%x", sha256.Sum256([]byte{byte(i)}))[:36])}}
		objs, seed = append(objs, cm), append(seed, cm)
	}
	cs := fake.NewClientset(seed...)
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: cs, Namespace: "default", Logger: testLog(t), HealthAddress: "127.0.0.1:0",
		Sharding: ctrl.Sharding{Ring: "ring", Identity: "a", LeaseDuration: 15 * time.Second}})
	must(t, err)
	var mu sync.Mutex
	reconciled, finalized, deleted := map[string]int{}, map[string]int{}, map[string]int{}
	c, err := ctrl.NewController(mgr, "keeper", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		reconciled[cm.Name]++
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	must(t, c.FilterUpdates(ctrl.GenerationChanged[*corev1.ConfigMap]))
	must(t, c.OnFinalize("example.com/cleanup", func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		finalized[cm.Name]++
		return nil
	}))
	must(t, c.OnDelete(func(ctx context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		deleted[cm.Name]++
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	idle := func() {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		must(t, mgr.WaitIdle(wctx, time.Second))
	}
	idle()
	if got := len(c.Cache().List("default", nil)); got != n {
		t.Fatalf("alone, the replica caches %d objects, want %d", got, n)
	}
	resp, err := http.Get("http://" + mgr.Addresses().Health + "/readyz")
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "ring ring: mode labels, serving 1.000 of the 64 buckets of the hash space among 1 members"; !strings.Contains(string(body), want) {
		t.Errorf("/readyz says %q, want a line %q", body, want)
	}
	count := func(m map[string]int) map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	before := count(reconciled)

	// Member b joins (a Lease of its own, freshly renewed, claiming
	// nothing yet): a gives up b's share.
	now := metav1.NewMicroTime(time.Now())
	leases := cs.CoordinationV1().Leases("default")
	_, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: shard.LeaseName("ring", "b"), Labels: map[string]string{shard.RingLabel: "ring"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("b"), LeaseDurationSeconds: new(int32(15)),
			RenewTime: &now, AcquireTime: &now}}, metav1.CreateOptions{})
	must(t, err)
	want := shard.Assign(shard.BucketUnits(), []string{"a", "b"})
	var moved []string
	for _, o := range objs {
		if want["b"].Contains(shard.Hash(string(o.UID))) {
			moved = append(moved, o.Name)
		}
	}
	if len(moved) == 0 || len(moved) == n {
		t.Fatalf("%d of %d objects in b's share: pick other UIDs", len(moved), n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(c.Cache().List("default", nil)) != n-len(moved) {
		if time.Now().After(deadline) {
			t.Fatalf("after b joined, a caches %d objects, want %d", len(c.Cache().List("default", nil)), n-len(moved))
		}
		idle()
	}
	idle()
	for _, name := range moved {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if len(cm.Finalizers) != 1 {
			t.Errorf("%s moved with finalizers %v, want the controller's kept", name, cm.Finalizers)
		}
		if cm.Labels[shard.Label("ring")] == "" {
			t.Errorf("%s has no shard label", name)
		}
	}
	if f, d := count(finalized), count(deleted); len(f) != 0 || len(d) != 0 {
		t.Errorf("moves ran OnFinalize for %v and OnDelete for %v, want neither", f, d)
	}

	// b's Lease goes: a takes the share back and reconciles its objects,
	// whatever the filter.
	mid := count(reconciled)
	must(t, leases.Delete(ctx, shard.LeaseName("ring", "b"), metav1.DeleteOptions{}))
	deadline = time.Now().Add(30 * time.Second)
	for len(c.Cache().List("default", nil)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("after b left, a caches %d objects, want %d", len(c.Cache().List("default", nil)), n)
		}
		idle()
	}
	idle()
	after := count(reconciled)
	for _, name := range moved {
		if after[name] <= mid[name] {
			t.Errorf("%s came back without a reconcile (%d before b joined, %d after it left)", name, before[name], after[name])
		}
	}
	if f, d := count(finalized), count(deleted); len(f) != 0 || len(d) != 0 {
		t.Errorf("moves ran OnFinalize for %v and OnDelete for %v, want neither", f, d)
	}

	// A deletion is a deletion.
	must(t, cs.CoreV1().ConfigMaps("default").Delete(ctx, moved[0], metav1.DeleteOptions{}))
	deadline = time.Now().Add(30 * time.Second)
	for count(deleted)[moved[0]] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("OnDelete did not run for %s", moved[0])
		}
		idle()
	}
	if d := count(deleted); len(d) != 1 || d[moved[0]] != 1 {
		t.Errorf("OnDelete ran for %v, want once for %s", d, moved[0])
	}
}

func testLog(t *testing.T) logr.Logger {
	if os.Getenv("CTRL_TEST_LOG") == "" {
		return logr.Discard()
	}
	return funcr.New(func(p, a string) { fmt.Println(time.Now().Format("15:04:05.000"), p, a) }, funcr.Options{Verbosity: 1})
}

// TestShardingConfig: what NewManager accepts and refuses of Sharding.
// LeaseDuration alone scales the other durations (15:10:2), so that a short
// lease needs no other setting.
func TestShardingConfig(t *testing.T) {
	tests := []struct {
		name string
		opts ctrl.Options
		want string // in the error; "" for none
	}{
		{"lease duration alone", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseDuration: 5 * time.Second}}, ""},
		{"identity sharder", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", Identity: "sharder"}}, ""},
		{"ring not a label", ctrl.Options{Sharding: ctrl.Sharding{Ring: "R.1"}}, `Sharding.Ring "R.1"`},
		{"identity not a label", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", Identity: "a_b"}}, `Sharding.Identity "a_b"`},
		{"with leader election", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r"}, LeaderElection: ctrl.LeaderElection{Name: "l"}}, "choose one"},
		{"by namespace in one namespace", ctrl.Options{Namespace: "ns", Sharding: ctrl.Sharding{Ring: "r", ByNamespace: true}}, "restricted to namespace"},
		{"renew deadline too long", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseDuration: 5 * time.Second, RenewDeadline: 6 * time.Second}}, "must be longer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.FakeClientset = fake.NewClientset()
			mgr, err := ctrl.NewManager(tt.opts)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			case err == nil && mgr.Identity() == "":
				t.Error("no identity chosen")
			}
		})
	}
	// A cluster-scoped type cannot be sharded by namespace.
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), Sharding: ctrl.Sharding{Ring: "r", ByNamespace: true}})
	must(t, err)
	_, err = ctrl.NewController(mgr, "nodes", func(context.Context, *corev1.Node) (ctrl.Result, error) { return ctrl.Result{}, nil }, ctrl.ControllerOptions{})
	if err == nil || !strings.Contains(err.Error(), "cluster-scoped") {
		t.Errorf("a sharded controller of Nodes by namespace: got %v, want an error saying Nodes are cluster-scoped", err)
	}
	_, err = ctrl.NewController(mgr, "nodes-everywhere", func(context.Context, *corev1.Node) (ctrl.Result, error) { return ctrl.Result{}, nil },
		ctrl.ControllerOptions{Unsharded: true})
	must(t, err)
}
