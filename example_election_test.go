package ctrl_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// Follow this replica's leadership: Leading answers now, and its channel
// says when to ask again. LeaseDuration alone sets the other durations.
func ExampleManager_Leading() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: fake.NewClientset(), LeaderElection: ctrl.LeaderElection{
		Name:         "example",
		LeaseOptions: ctrl.LeaseOptions{Identity: "replica-1", LeaseDuration: 6 * time.Second},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println("identity:", mgr.Identity())
	leading, changed := mgr.Leading()
	fmt.Println("leading before Start:", leading)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	<-changed
	leading, changed = mgr.Leading()
	fmt.Println("leading once it holds the Lease:", leading)
	cancel()
	<-changed
	leading, _ = mgr.Leading()
	fmt.Println("leading once stopped:", leading, <-done)
	// Output:
	// identity: replica-1
	// leading before Start: false
	// leading once it holds the Lease: true
	// leading once stopped: false <nil>
}
