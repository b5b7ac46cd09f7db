package ctrl_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

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
		Sharding: ctrl.Sharding{Ring: "ring", LeaseOptions: ctrl.LeaseOptions{Identity: "a", LeaseDuration: 15 * time.Second}}})
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
	want := shard.Assign(shard.BucketUnits(), []string{"a", "b"}, map[string]shard.Set{"a": shard.All})
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
		{"lease duration alone", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseOptions: ctrl.LeaseOptions{LeaseDuration: 5 * time.Second}}}, ""},
		{"identity sharder", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseOptions: ctrl.LeaseOptions{Identity: "sharder"}}}, ""},
		{"ring not a label", ctrl.Options{Sharding: ctrl.Sharding{Ring: "R.1"}}, `Sharding.Ring "R.1"`},
		{"identity not a label", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseOptions: ctrl.LeaseOptions{Identity: "a_b"}}}, `Sharding.Identity "a_b"`},
		{"with leader election", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r"}, LeaderElection: ctrl.LeaderElection{Name: "l"}}, "choose one"},
		{"by namespace in one namespace", ctrl.Options{Namespace: "ns", Sharding: ctrl.Sharding{Ring: "r", ByNamespace: true}}, "restricted to namespace"},
		{"renew deadline too long", ctrl.Options{Sharding: ctrl.Sharding{Ring: "r", LeaseOptions: ctrl.LeaseOptions{LeaseDuration: 5 * time.Second, RenewDeadline: 6 * time.Second}}}, "must be longer"},
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

// ringObjects returns n ConfigMaps in namespace default whose UIDs spread
// over the hash space, with data v=1.
func ringObjects(n int) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		out = append(out, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default",
			Name: fmt.Sprintf("cm-%02d", i), UID: types.UID(fmt.Sprintf("%x", sha256.Sum256([]byte{byte(i)}))[:36])},
			Data: map[string]string{"v": "1"}})
	}
	return out
}

// joinRing creates the Lease of member id of ring "ring", freshly renewed
// and claiming nothing: the replicas give up its share.
func joinRing(t *testing.T, ctx context.Context, cs *fake.Clientset, id string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	_, err := cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: shard.LeaseName("ring", id), Labels: map[string]string{shard.RingLabel: "ring"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new(id), LeaseDurationSeconds: new(int32(15)),
			RenewTime: &now, AcquireTime: &now}}, metav1.CreateOptions{})
	must(t, err)
}

// TestShareChangeNeverGoesBack: when a sharded cache's share changes, its
// feed lists again for the new share while the cache still holds newer
// copies of the objects it keeps. A list at resourceVersion "0" may be
// answered from a lagging cache of the server, as it is here: the feed
// must not hand a reconcile an object older than one it handed out.
func TestShareChangeNeverGoesBack(t *testing.T) {
	cs := fake.NewClientset(ringObjects(40)...)
	var stale atomic.Pointer[map[string]string] // name -> data v, served to lists at "0"
	cs.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		old := stale.Load()
		if old == nil || a.(clienttesting.ListActionImpl).ListOptions.ResourceVersion != "0" {
			return false, nil, nil
		}
		objs, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		l := objs.(*corev1.ConfigMapList)
		for i := range l.Items {
			l.Items[i].Data = map[string]string{"v": (*old)[l.Items[i].Name]}
		}
		return true, l, nil
	})
	mgr := newManager(t, ctrl.Options{FakeClientset: cs, Namespace: "default", Logger: testLog(t),
		Sharding: ctrl.Sharding{Ring: "ring", LeaseOptions: ctrl.LeaseOptions{Identity: "a", LeaseDuration: 15 * time.Second}}})
	var mu sync.Mutex
	seen := map[string][]string{}
	c, err := ctrl.NewController(mgr, "versions", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if s := seen[cm.Name]; len(s) == 0 || s[len(s)-1] != cm.Data["v"] {
			seen[cm.Name] = append(s, cm.Data["v"])
		}
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	// The server's cache falls behind at v=1; the objects move on to v=2.
	old := map[string]string{}
	for i := range 40 {
		old[fmt.Sprintf("cm-%02d", i)] = "1"
	}
	stale.Store(&old)
	for i := range 40 {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%02d", i), metav1.GetOptions{})
		must(t, err)
		cm.Data = map[string]string{"v": "2"}
		_, err = cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
		must(t, err)
	}
	waitIdle(t, mgr)

	// Member b joins: the share shrinks, and the feed lists the new share.
	joinRing(t, ctx, cs, "b")
	deadline := time.Now().Add(30 * time.Second)
	for len(c.Cache().List("default", nil)) == 40 {
		if time.Now().After(deadline) {
			t.Fatal("the share did not change within 30s")
		}
		waitIdle(t, mgr)
	}
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	for name, vs := range seen {
		if i := slices.Index(vs, "2"); i >= 0 && slices.Contains(vs[i:], "1") {
			t.Errorf("%s was reconciled at v=%v: back to an older version after a newer one", name, vs)
		}
	}
}

// shardedManager returns a manager of one replica, "a", of ring "ring" on
// the fakes (label mode: they cannot select by hash), with a health
// endpoint.
func shardedManager(t *testing.T, cs *fake.Clientset, dyn *dynamicfake.FakeDynamicClient) *ctrl.Manager {
	t.Helper()
	opts := ctrl.Options{FakeClientset: cs, Logger: testLog(t), HealthAddress: "127.0.0.1:0",
		Sharding: ctrl.Sharding{Ring: "ring", LeaseOptions: ctrl.LeaseOptions{Identity: "a", LeaseDuration: 15 * time.Second}}}
	if dyn != nil {
		opts.FakeDynamic = dyn
	}
	return newManager(t, opts)
}

// TestShardingWithAbsentOptionalKind: a sharded controller of an optional
// kind whose CRD is not installed holds up neither the ring nor the other
// controllers, and its labeler waits for the CRD as its cache does: the
// manager is ready, and once the CRD comes, its objects are labeled and
// reconciled.
func TestShardingWithAbsentOptionalKind(t *testing.T) {
	cs := fake.NewClientset(ringObjects(4)...)
	dyn := newOptionalFake()
	// As the API server does, the fake serves Widgets only while their
	// CRD is installed.
	dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if _, err := dyn.Tracker().Get(crds, "", "widgets.example.com"); err != nil {
			return true, nil, apierrors.NewNotFound(widgets.GroupResource(), "")
		}
		return false, nil, nil
	})
	dyn.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		if _, err := dyn.Tracker().Get(crds, "", "widgets.example.com"); err != nil {
			return true, nil, apierrors.NewNotFound(widgets.GroupResource(), "")
		}
		return false, nil, nil
	})
	mgr := shardedManager(t, cs, dyn)
	var mu sync.Mutex
	reconciled := map[string]int{}
	_, err := ctrl.NewController(mgr, "widgets", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		mu.Lock()
		reconciled["widget "+w.Name]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Optional: true}})
	must(t, err)
	_, err = ctrl.NewController(mgr, "configmaps", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		reconciled["configmap "+cm.Name]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	mu.Lock()
	if n := len(reconciled); n != 4 {
		t.Errorf("with the CRD absent: reconciled %v, want the 4 ConfigMaps", reconciled)
	}
	mu.Unlock()
	if code, body := readyz(t, mgr); code != http.StatusOK || !strings.Contains(body, "waiting for CustomResourceDefinition widgets.example.com") {
		t.Errorf("with the CRD absent: /readyz answers %d %q, want 200 and the optional kind waiting", code, body)
	}

	must(t, installCRD(ctx, mgr, widgets))
	waitIdle(t, mgr)
	client, err := ctrl.NewClient[*Widget](mgr, ctrl.ClientOptions{})
	must(t, err)
	_, err = client.Create(ctx, &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w", UID: "w-uid"}})
	must(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		waitIdle(t, mgr)
		mu.Lock()
		n := reconciled["widget w"]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the widget created once the CRD came was never reconciled")
		}
	}
}

// TestShardLabelerFollowsNamespaces: in label mode, the objects of a
// namespace added to a sharded controller's cache are labeled, so
// reconciled, as those of its first namespaces are.
func TestShardLabelerFollowsNamespaces(t *testing.T) {
	cs := fake.NewClientset(configMap("a", "one"))
	mgr := shardedManager(t, cs, nil)
	var mu sync.Mutex
	reconciled := map[ctrl.Key]int{}
	c, err := ctrl.NewController(mgr, "configmaps", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		reconciled[ctrl.KeyOf(cm)]++
		mu.Unlock()
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{"a"}}})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	must(t, c.Cache().SetNamespaces("a", "b"))
	_, err = cs.CoreV1().ConfigMaps("b").Create(ctx, configMap("b", "two"), metav1.CreateOptions{})
	must(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		waitIdle(t, mgr)
		mu.Lock()
		n := reconciled[ctrl.Key{Namespace: "b", Name: "two"}]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			cm, _ := cs.CoreV1().ConfigMaps("b").Get(ctx, "two", metav1.GetOptions{})
			t.Fatalf("b/two, in a namespace added with SetNamespaces, was never reconciled; its labels: %v", cm.GetLabels())
		}
	}
}

// TestStopShardedController: a sharded controller that stops leaves
// nothing of itself in the ring: in label mode, nothing watches its type
// for unlabeled objects any more.
func TestStopShardedController(t *testing.T) {
	cs := fake.NewClientset(configMap("default", "one"))
	var mu sync.Mutex
	open := 0 // watches of ConfigMaps not yet stopped
	cs.PrependWatchReactor("configmaps", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(clienttesting.WatchActionImpl).ListOptions)
		if err != nil {
			return true, nil, err
		}
		mu.Lock()
		open++
		mu.Unlock()
		return true, &countedWatch{Interface: w, stop: func() { mu.Lock(); open--; mu.Unlock() }}, nil
	})
	mgr := shardedManager(t, cs, nil)
	c, err := ctrl.NewController(mgr, "configmaps", noop, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	one, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "one", metav1.GetOptions{})
	must(t, err)
	if one.Labels[shard.Label("ring")] == "" {
		t.Fatalf("default/one has no shard label while its controller runs: %v", one.Labels)
	}
	must(t, c.Stop(ctx))
	waitIdle(t, mgr)
	mu.Lock()
	defer mu.Unlock()
	if open != 0 {
		t.Errorf("after the only sharded controller of ConfigMaps stopped, %d watches of ConfigMaps are open, want none", open)
	}
}

// countedWatch calls stop once when stopped.
type countedWatch struct {
	watch.Interface
	once sync.Once
	stop func()
}

func (w *countedWatch) Stop() {
	w.once.Do(w.stop)
	w.Interface.Stop()
}

// TestShardLabelChangeMovesNoOwner runs two replicas of a ring on one fake
// clientset (label mode). While replica a reconciles an object of its
// share, the object's shard label is set to a bucket of b's, as a user or
// a GitOps tool applying an old manifest might: b, whose cache now holds
// the object, does not reconcile it (objects are placed by their UID, not
// their label) and puts its label back, and a reconciles it again after.
func TestShardLabelChangeMovesNoOwner(t *testing.T) {
	cs := fake.NewClientset(ringObjects(40)...)
	var mu sync.Mutex
	running := map[string]int{}         // name -> reconciles running, on either replica
	reconciled := map[string][]string{} // name -> the replicas that reconciled it, in order
	var overlaps []string
	var held atomic.Pointer[string] // the name whose reconcile on a waits for gate
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	replica := func(id string) (*ctrl.Manager, *ctrl.Controller[*corev1.ConfigMap]) {
		mgr := newManager(t, ctrl.Options{FakeClientset: cs, Namespace: "default", Logger: testLog(t),
			Sharding: ctrl.Sharding{Ring: "ring", LeaseOptions: ctrl.LeaseOptions{Identity: id, LeaseDuration: 15 * time.Second}}})
		c, err := ctrl.NewController(mgr, "keeper", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
			mu.Lock()
			running[cm.Name]++
			if running[cm.Name] > 1 {
				overlaps = append(overlaps, cm.Name+" on "+id)
			}
			reconciled[cm.Name] = append(reconciled[cm.Name], id)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running[cm.Name]--
				mu.Unlock()
			}()
			if h := held.Load(); h != nil && *h == cm.Name && id == "a" && cm.Annotations["hold"] == "yes" {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-gate
			}
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		return mgr, c
	}
	a, ca := replica("a")
	start(t, a)
	waitIdle(t, a)
	b, cb := replica("b")
	ctx := start(t, b)
	// b takes its share from a.
	for deadline := time.Now().Add(time.Minute); ; {
		waitIdle(t, a)
		waitIdle(t, b)
		na, nb := len(ca.Cache().List("default", nil)), len(cb.Cache().List("default", nil))
		if na+nb == 40 && na > 0 && nb > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, a caches %d objects and b %d, want 40 between them", na, nb)
		}
	}
	mine, theirs := ca.Cache().List("default", nil)[0], cb.Cache().List("default", nil)[0]
	label := shard.Label("ring")
	home := mine.Labels[label]

	// a reconciles the object, and holds on.
	held.Store(&mine.Name)
	_, err := cs.CoreV1().ConfigMaps("default").Patch(ctx, mine.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"hold":"yes"}}}`), metav1.PatchOptions{})
	must(t, err)
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("a did not reconcile the object within a minute")
	}
	// Its label moves it to one of b's buckets.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, theirs.Labels[label])
	_, err = cs.CoreV1().ConfigMaps("default").Patch(ctx, mine.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	restored := func() bool {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, mine.Name, metav1.GetOptions{})
		must(t, err)
		return cm.Labels[label] == home
	}
	for deadline := time.Now().Add(time.Minute); !restored(); time.Sleep(10 * time.Millisecond) { // polling the object
		mu.Lock()
		n := len(overlaps)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	if len(overlaps) > 0 {
		t.Errorf("reconciled on two replicas at once: %v", overlaps)
	}
	mu.Unlock()
	if !restored() {
		t.Errorf("the object's shard label is not back at %s, its UID's bucket", home)
	}
	mu.Lock()
	before := len(reconciled[mine.Name])
	mu.Unlock()
	close(gate)
	for deadline := time.Now().Add(time.Minute); ; {
		waitIdle(t, a)
		waitIdle(t, b)
		mu.Lock()
		got := slices.Clone(reconciled[mine.Name])
		mu.Unlock()
		if len(got) > before {
			if slices.Contains(got, "b") {
				t.Errorf("the object was reconciled by %v, want a alone", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the object back in a's cache was not reconciled again within a minute: %v", got)
		}
	}
}
