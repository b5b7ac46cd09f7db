package leader

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(name, rv, holder string, renewed time.Time, d time.Duration) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt, LeaseDurationSeconds: new(leaseSeconds(d))}}
}

// TestObserverExpired: expiry counts from the Lease's renewTime, so that an
// observer that starts late finds a Lease abandoned long ago expired at
// once; a renewTime in the observer's future counts from its first
// sighting; a new version is a new sighting; no holder is free.
func TestObserverExpired(t *testing.T) {
	clock := newFakeClock()
	o := &Observer{Clock: clock}
	now := clock.Now()
	tests := []struct {
		name  string
		l     *coordinationv1.Lease
		later time.Duration // then judged again after this long
		want  [2]bool       // now, later
	}{
		{"renewed just now", lease("a", "1", "x", now, 5*time.Second), 5 * time.Second, [2]bool{false, true}},
		{"abandoned long ago", lease("b", "1", "x", now.Add(-time.Minute), 5*time.Second), 0, [2]bool{true, true}},
		{"renewed 4 s ago", lease("c", "1", "x", now.Add(-4*time.Second), 5*time.Second), time.Second, [2]bool{false, true}},
		{"clock ahead", lease("d", "1", "x", now.Add(time.Hour), 5*time.Second), 5 * time.Second, [2]bool{false, true}},
		{"free", lease("e", "1", "", now, 5*time.Second), 0, [2]bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := o.Expired(tt.l); got != tt.want[0] {
				t.Errorf("now: got expired %t, want %t", got, tt.want[0])
			}
		})
	}
	clock.Set(5 * time.Second)
	for _, tt := range tests {
		t.Run(tt.name+"/later", func(t *testing.T) {
			if got := o.Expired(tt.l); got != tt.want[1] {
				t.Errorf("after 5 s: got expired %t, want %t", got, tt.want[1])
			}
		})
	}
	// A renewal the observer sees for the first time, stamped an hour
	// ahead: alive for one lease duration from now, not for an hour.
	l := lease("d", "2", "x", now.Add(time.Hour), 5*time.Second)
	if o.Expired(l) {
		t.Error("a new version of d expired at its first sighting")
	}
	if got := o.ExpiredFor(lease("b", "1", "x", clock.Now().Add(-time.Minute), 5*time.Second)); got != 55*time.Second {
		t.Errorf("ExpiredFor: got %s, want 55s", got)
	}
	o.Forget(func(name string) bool { return name == "a" })
	if len(o.seen) != 1 {
		t.Errorf("after Forget: %d sightings, want 1", len(o.seen))
	}
}

// TestRunPublishes: Annotations go out with each write, Wake renews at
// once, Written sees what was stored, and DeleteOnRelease deletes the Lease
// when the holder lets it go.
func TestRunPublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		leases := &fakeLeases{clock: clock}
		wake := make(chan struct{}, 1)
		published := "one"
		var written []string
		cfg := Config{Name: "l", Namespace: "ns", Identity: "me", Leases: leases, Clock: clock, Log: logr.Discard(),
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			Annotations:     func() map[string]string { return map[string]string{"held": published} },
			Wake:            wake,
			Written:         func(l *coordinationv1.Lease) { written = append(written, l.Annotations["held"]) },
			DeleteOnRelease: true}
		ctx, cancel := context.WithCancel(context.Background())
		result := make(chan error, 1)
		go func() { result <- Run(ctx, cfg, func(ctx context.Context, _ *Term) { <-ctx.Done() }) }()
		clock.Step(0)
		if len(written) != 1 || written[0] != "one" {
			t.Fatalf("after acquiring: written %v, want [one]", written)
		}
		published = "two"
		at := clock.Now()
		wake <- struct{}{}
		synctest.Wait()
		if len(written) != 2 || written[1] != "two" {
			t.Fatalf("after a wake: written %v, want [one two]", written)
		}
		if clock.Now() != at {
			t.Errorf("the wake's renewal waited %s", clock.Now().Sub(at))
		}
		cancel()
		clock.Step(0)
		if err := <-result; err != nil {
			t.Fatalf("Run: %v", err)
		}
		leases.mu.Lock()
		defer leases.mu.Unlock()
		if leases.lease != nil {
			t.Errorf("after Run returned: the Lease is still there, held by %q", ptrValue(leases.lease.Spec.HolderIdentity))
		}
	})
}
