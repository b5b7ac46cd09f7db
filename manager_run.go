package ctrl

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/typedctrl/ctrl/internal/binding"
)

// lead runs the controllers until stop (their terms) is done, then stops
// them, at once if stop ended without Start's ctx, or pauses them
// (StandbyOnLoss).
func (m *Manager) lead(stop, ctx context.Context, ctrls []managedController) error {
	reconcileCtx, cancelReconciles := context.WithCancel(context.WithoutCancel(stop))
	defer cancelReconciles()
	// Leading before the controllers start (Events need it); observers
	// told after, so waiting then finds every object queued.
	m.leadership.Begin(reconcileCtx)
	for _, c := range ctrls {
		c.start(reconcileCtx)
	}
	m.leadership.Set(reconcileCtx)
	m.startedOnce.Do(func() { close(m.startedCh) })
	m.log.Info("controllers started")
	<-stop.Done()
	m.leadership.Set(nil)
	timeout := m.opts.ShutdownTimeout
	standby := false
	if ctx.Err() == nil {
		cancelReconciles()
		standby = m.opts.LeaderElection.StandbyOnLoss && errors.Is(context.Cause(stop), ErrLeadershipLost)
	}
	m.log.Info("stopping controllers: waiting for running reconciles", "timeout", timeout)
	var errs []error
	deadline := time.Now().Add(timeout)
	for _, c := range ctrls {
		stop := c.shutdown
		if standby {
			stop = c.pause
		}
		if err := stop(time.Until(deadline)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) fatal(err error) {
	m.mu.Lock()
	fail := m.fail
	m.mu.Unlock()
	if fail != nil {
		fail(err)
	}
}

// startCache runs c on the manager's running context. Under m.mu.
func (m *Manager) startCache(c managedCache) {
	m.wg.Add(1)
	ctx, stop := context.WithCancel(m.running) // stopped alone when released
	r := c.refsOf()
	r.stop, r.done = stop, make(chan struct{})
	log, done := m.log.WithValues("cache", c.describe()), r.done
	go func() {
		defer m.wg.Done()
		defer close(done)
		c.run(ctx, log)
	}()
}

// waitForSync fails at once on an unserved resource; forbidden caches are not awaited.
func (m *Manager) waitForSync(ctx context.Context, caches []managedCache) error {
	timer := time.NewTimer(m.opts.SyncTimeout)
	defer timer.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	expired := false
	for _, c := range caches {
		for synced := false; !synced; {
			if expired {
				select {
				case <-c.syncedChan():
					synced = true
					continue
				default:
				}
				if c.forbidden() != nil {
					break // reported, and waited for by its controllers
				}
				err := fmt.Errorf("ctrl: %s did not sync within %s", c.describe(), m.opts.SyncTimeout)
				if last := c.lastError(); last != nil {
					err = fmt.Errorf("%w: %w", err, last)
				}
				return err
			}
			select {
			case <-c.syncedChan():
				synced = true
			case <-ctx.Done():
				return nil
			case <-timer.C:
				expired = true
			case <-poll.C:
				switch last := c.lastError(); {
				case c.forbidden() != nil:
					synced = true // reported, and waited for by its controllers
				case last == nil:
				case apierrors.IsNotFound(last):
					return fmt.Errorf("ctrl: %s is not served by the API server (is its CustomResourceDefinition installed?): %w", c.describe(), last)
				case errors.Is(last, binding.ErrNoListKind):
					return fmt.Errorf("ctrl: %s cannot be listed: %w", c.describe(), last)
				}
			}
		}
	}
	return nil
}
