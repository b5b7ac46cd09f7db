package ctrltest

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/typedctrl/ctrl"
)

// StartManager runs a manager for the life of a test: it creates it from
// opts (with Logger set to [Logger](tb) unless opts sets one), wires it with
// setup (which may be nil), starts it, and returns it. It does not block:
// call WaitIdle before asserting, with a context of its own, such as
// tb.Context() with a deadline. A failure to create or wire fails the test
// at once.
//
// When the test ends (tb.Cleanup, after its deferred calls) the manager is
// stopped and waited for; the test fails if Start returned an error, or if
// a goroutine started since StartManager was called is still running
// (go.uber.org/goleak; the HTTP/2 connections client-go keeps idle for later
// clients are let be). Goroutines of tests running in parallel count too:
// use it in tests that do not call t.Parallel.
func StartManager(tb testing.TB, opts ctrl.Options, setup func(*ctrl.Manager) error) *ctrl.Manager {
	tb.Helper()
	before := goleak.IgnoreCurrent()
	if opts.Logger.GetSink() == nil {
		opts.Logger = Logger(tb)
	}
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		tb.Fatal(err)
	}
	if setup != nil {
		if err := setup(mgr); err != nil {
			tb.Fatalf("ctrltest: StartManager: setup: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("ctrltest: manager: Start: %v", err)
		}
		if err := goleak.Find(before, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")); err != nil {
			tb.Errorf("ctrltest: goroutines left running after the manager stopped: %v", err)
		}
	})
	return mgr
}
