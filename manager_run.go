package ctrl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/internal/synced"
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
	waits := make([]synced.Cache, len(caches))
	for i, c := range caches {
		waits[i] = syncing{c}
	}
	if err := synced.Wait(ctx, m.opts.SyncTimeout, waits); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}

// syncing is a cache as synced.Wait reads it.
type syncing struct{ managedCache }

func (s syncing) String() string          { return s.describe() }
func (s syncing) Synced() <-chan struct{} { return s.syncedChan() }
func (s syncing) Forbidden() bool         { return s.forbidden() != nil }
func (s syncing) LastError() error        { return s.lastError() }
