package ctrl_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/typedctrl/ctrl"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start runs mgr until the test ends, and fails the test if Start returns
// an error. It returns the manager's context.
func start(t *testing.T, mgr *ctrl.Manager) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return ctx
}

// waitIdle waits for mgr to be idle, failing the test after a minute.
func waitIdle(t *testing.T, mgr *ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
