package ctrl_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// TestLeadershipLost takes the Lease from a leader on the fake clientset
// while a reconcile is running. The reconcile's context is canceled; its
// write afterwards fails with ErrLeadershipLost, as does its Event; the key
// is not retried and counts as no error; Leading turns false. Then the
// replica either exits (Start returns the loss) or stands by and, once the
// Lease is free, leads again and reconciles every object.
func TestLeadershipLost(t *testing.T) {
	for _, standby := range []bool{false, true} {
		t.Run(map[bool]string{false: "exit", true: "standby"}[standby], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testLeadershipLost(t, standby) })
		})
	}
}

func testLeadershipLost(t *testing.T, standby bool) {
	cs := fake.NewClientset(configMap("ns", "a"))
	mgr := newManager(t, ctrl.Options{FakeClientset: cs, Namespace: "ns", LeaderElection: ctrl.LeaderElection{
		Name:          "lock",
		LeaseOptions:  ctrl.LeaseOptions{Identity: "me", LeaseDuration: 3 * time.Second},
		StandbyOnLoss: standby,
	}})
	if got := mgr.Identity(); got != "me" {
		t.Errorf("Identity: got %q, want me", got)
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	must(t, err)
	rec, err := ctrl.NewRecorder[*corev1.ConfigMap](mgr, "lost")
	must(t, err)
	var (
		mu       sync.Mutex
		calls    int
		writeErr error
	)
	_, err = ctrl.NewController(mgr, "lost", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if !first {
			return ctrl.Result{}, nil
		}
		rec.Event(cm, corev1.EventTypeNormal, "Leading", "emitted while leading")
		if err := ctrl.CheckLeadership(ctx); err != nil {
			t.Errorf("CheckLeadership while leading: %v", err)
		}
		<-ctx.Done()
		if err := ctrl.CheckLeadership(ctx); !errors.Is(err, ctrl.ErrLeadershipLost) {
			t.Errorf("CheckLeadership after the loss: got %v, want ErrLeadershipLost", err)
		}
		rec.Event(cm, corev1.EventTypeNormal, "Lost", "emitted after the loss")
		cm = cm.DeepCopy()
		cm.Data = map[string]string{"written": "after the loss"}
		_, err := cms.Update(ctx, cm)
		mu.Lock()
		writeErr = err
		mu.Unlock()
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	leading, changed := mgr.Leading()
	if leading {
		t.Error("Leading before Start: got true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	<-changed
	leading, changed = mgr.Leading()
	if !leading {
		t.Fatal("Leading after the first change: got false, want true")
	}
	synctest.Wait()

	leases := cs.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, "lock", metav1.GetOptions{})
	must(t, err)
	l.Spec.HolderIdentity = new("other")
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	must(t, err)
	<-changed // at the next renewal
	leading, changed = mgr.Leading()
	if leading {
		t.Error("Leading after the Lease was taken: got true")
	}
	synctest.Wait()

	mu.Lock()
	if !errors.Is(writeErr, ctrl.ErrLeadershipLost) {
		t.Errorf("a write after the loss: got %v, want ErrLeadershipLost", writeErr)
	}
	if calls != 1 {
		t.Errorf("reconciles: got %d, want 1 (no retry, nothing while another leads)", calls)
	}
	mu.Unlock()
	if got, _ := cms.Uncached().Get(ctx, ctrl.Key{Namespace: "ns", Name: "a"}); got.Data != nil {
		t.Errorf("the object was written after the loss: %v", got.Data)
	}
	if got := metricValue(t, mgr.Registry(), `controller_runtime_reconcile_errors_total{controller="lost"}`); got != 0 {
		t.Errorf("reconcile errors: got %v, want 0: a lost lead is not the object's failure", got)
	}
	if got := metricValue(t, mgr.Registry(), `leader_election_master_status{name="lock"}`); got != 0 {
		t.Errorf("leader_election_master_status: got %v, want 0", got)
	}
	events, err := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
	must(t, err)
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	if len(reasons) != 1 || reasons[0] != "Leading" {
		t.Errorf("events: got reasons %q, want only the one emitted while leading", reasons)
	}

	if !standby {
		err := <-done
		if !errors.Is(err, ctrl.ErrLeadershipLost) {
			t.Errorf("Start: got %v, want ErrLeadershipLost", err)
		}
		cancel()
		return
	}
	l, err = leases.Get(ctx, "lock", metav1.GetOptions{})
	must(t, err)
	l.Spec.HolderIdentity = nil // the other replica releases the Lease
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	must(t, err)
	<-changed
	if leading, _ = mgr.Leading(); !leading {
		t.Error("Leading after the Lease was released: got false, want true")
	}
	waitIdle(t, mgr)
	mu.Lock()
	if calls != 2 {
		t.Errorf("reconciles: got %d, want 2: every object once more when leading again", calls)
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// TestDefaultIdentity: with no Identity set, leader election and sharding
// both name the replica by its host name and a random suffix, as one DNS
// label, different in each manager.
func TestDefaultIdentity(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	for name, opts := range map[string]ctrl.Options{
		"leader election": {LeaderElection: ctrl.LeaderElection{Name: "lock"}},
		"sharding":        {Sharding: ctrl.Sharding{Ring: "ring"}},
	} {
		t.Run(name, func(t *testing.T) {
			seen := map[string]bool{}
			for range 3 {
				opts.FakeClientset = fake.NewClientset()
				mgr, err := ctrl.NewManager(opts)
				must(t, err)
				id := mgr.Identity()
				if !label.MatchString(id) || !regexp.MustCompile(`(^|-)[a-z0-9]{8}$`).MatchString(id) {
					t.Errorf("Identity %q: want a DNS label ending in 8 random characters", id)
				}
				if seen[id] {
					t.Errorf("Identity %q chosen twice", id)
				}
				seen[id] = true
			}
		})
	}
}
