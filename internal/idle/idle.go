// Package idle waits for a manager to be idle, for Manager.WaitIdle, and
// words what keeps it busy or failing. The manager says what is busy; the
// package polls it, because "idle" is a state of many parts at one instant
// that no single event announces.
package idle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/internal/workq"
)

// Checks are what Wait asks of the manager.
type Checks struct {
	// Busy says what is busy, or "" when the manager is idle.
	Busy func() string
	// Failing names the failing keys with their last errors, or is nil.
	Failing func() error
	// StartErr is the error the manager stopped with, or nil.
	StartErr func() error
}

// Wait blocks until the manager is idle, ctx is done, or stopped is
// closed, polling Busy every millisecond once started is closed. Idle, it
// returns nil, or an error wrapping Failing's.
func Wait(ctx context.Context, started, stopped <-chan struct{}, requeueWithin time.Duration, c Checks) error {
	select {
	case <-started:
	case <-stopped:
		return c.stopped()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		busy := c.Busy()
		if busy == "" {
			if err := c.Failing(); err != nil {
				return fmt.Errorf("idle, but reconciles failed (no retry due within %s):\n%w", requeueWithin, err)
			}
			return nil
		}
		select {
		case <-tick.C:
		case <-stopped:
			return c.stopped()
		case <-ctx.Done():
			err := fmt.Errorf("%w; still busy: %s", context.Cause(ctx), busy)
			if failing := c.Failing(); failing != nil {
				err = fmt.Errorf("%w; reconciles failing:\n%w", err, failing)
			}
			return err
		}
	}
}

// stopped says that the manager stopped, why, and which keys were
// failing: a context that ends both Start and WaitIdle may end either first.
func (c Checks) stopped() error {
	err := errors.New("manager stopped")
	if startErr := c.StartErr(); startErr != nil {
		err = fmt.Errorf("manager stopped: %w", startErr)
	}
	if failing := c.Failing(); failing != nil {
		err = fmt.Errorf("%w; reconciles failing:\n%w", err, failing)
	}
	return err
}

// Queue is what Busy reads of a controller's work queue.
type Queue interface {
	BacklogLen() int64
	Len() int
	Processing() int64
	AsideLen() int
	WaitingLen() int
	DueWithin(d time.Duration) bool
}

// QueueBusy says what keeps q busy, or "".
func QueueBusy(q Queue, requeueWithin time.Duration) string {
	switch {
	case q.BacklogLen() != 0: // read first: the backlog empties into the queue
		return fmt.Sprintf("%d keys of a list not yet queued", q.BacklogLen())
	case q.Len() != 0:
		return fmt.Sprintf("%d keys queued", q.Len())
	case q.Processing() != 0:
		return fmt.Sprintf("%d keys being reconciled", q.Processing())
	case q.AsideLen() != 0:
		return fmt.Sprintf("%d keys set aside while other clusters' keys are reconciled", q.AsideLen())
	case q.WaitingLen() != 0:
		return fmt.Sprintf("%d keys waiting for the API server", q.WaitingLen())
	case q.DueWithin(requeueWithin):
		return fmt.Sprintf("a requeue is due within %s", requeueWithin)
	}
	return ""
}

// MaxFailuresShown bounds the keys an error of Failures names.
const MaxFailuresShown = 5

// Failures names the first of a controller's failing keys, sorted, each
// with its last error and, as retryDue says, when it is retried.
func Failures[K interface {
	comparable
	fmt.Stringer
}](ctrl fmt.Stringer, failures []workq.Failure[K], retryDue func(K) string) []error {
	var errs []error
	for i, e := range failures {
		if i == MaxFailuresShown {
			errs = append(errs, fmt.Errorf("%s: and %d more keys", ctrl, len(failures)-i))
			break
		}
		errs = append(errs, fmt.Errorf("%s: %s failed %d times%s: %w", ctrl, e.Key, e.Attempts, retryDue(e.Key), e.Err))
	}
	return errs
}
