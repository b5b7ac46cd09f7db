package ctrl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/internal/idle"
)

// WaitIdle blocks until the manager is idle, ctx is done (give it a
// deadline), or the manager stopped: for tests, instead of sleeps. Idle:
// every cache synced and controller started (leading, with leader
// election); every write through this manager's [Client]s observed by the
// caches of its type (a last-finalizer removal, by the removal); no event
// being dispatched, key queued or waiting for a server, or reconcile
// running; every [Recorder] Event written (or dropped as spam); no requeue
// due within requeueWithin (not a timeout).
//
// It returns nil once idle with no key awaiting a retry; otherwise an error
// naming each failing key with its last error (wrapped for errors.Is and
// errors.As) and, if ctx ended, what was busy (Testable).
func (m *Manager) WaitIdle(ctx context.Context, requeueWithin time.Duration) error {
	err := idle.Wait(ctx, m.startedCh, m.stopped, requeueWithin, idle.Checks{
		Busy:    func() string { return m.busy(requeueWithin) },
		Failing: m.failing,
		StartErr: func() error {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.startErr
		},
	})
	if err != nil {
		return fmt.Errorf("ctrl: WaitIdle: %w", err)
	}
	return nil
}

func (m *Manager) failing() error {
	m.mu.Lock()
	ctrls := append([]managedController(nil), m.ctrlList...)
	caches := append([]managedCache(nil), m.cacheList...)
	m.mu.Unlock()
	var errs []error
	for _, c := range ctrls {
		if err := c.failing(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range caches {
		if err := c.changes(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// busy checks WaitIdle's conditions between two reads of the activity
// counter, so they held at one instant. It says what is busy, or "".
func (m *Manager) busy(requeueWithin time.Duration) string {
	before := m.activity.Load()
	m.mu.Lock()
	caches := append([]managedCache(nil), m.cacheList...)
	ctrls := append([]managedController(nil), m.ctrlList...)
	m.mu.Unlock()
	for _, c := range caches {
		select {
		case <-c.syncedChan():
		default:
			return c.describe() + ": " + c.notReady()
		}
		if b := c.busy(); b != "" {
			return b
		}
	}
	for _, c := range ctrls {
		if b := c.busy(requeueWithin); b != "" {
			return b
		}
	}
	// After the controllers: a reconcile that ended emitted before.
	if n := m.events.Pending(); n > 0 {
		return fmt.Sprintf("%d Events not yet written", n)
	}
	if b := m.policy.Busy(); b != "" {
		return b
	}
	if m.activity.Load() != before {
		return "activity while checking"
	}
	return ""
}

// busy: a Client's write not yet observed, or an event being dispatched.
func (c *Cache[T]) busy() string {
	if c.dispatching.Load() != 0 {
		return c.String() + ": dispatching an event"
	}
	if c.opt != nil && c.opt.Busy() {
		return c.String() + ": following a change of its CustomResourceDefinition"
	}
	if c.refeeding.Load() {
		return c.String() + ": changing its watches"
	}
	for k, f := range c.feedMap() {
		where := c.String()
		if k.cluster != "" {
			where = fmt.Sprintf("%s in cluster %q", c, k.cluster)
		}
		if ch := f.fakeEvents.Load(); ch != nil && len(*ch) > 0 {
			return fmt.Sprintf("%s: %d watch events not yet received", where, len(*ch))
		}
		if c.share != nil && f.view != c.share.View() {
			return where + ": listing its new share"
		}
		switch {
		case f.isSynced.Load():
		case k.cluster == "" && c.HasSynced():
			// A feed started later (new namespace, CRD, share) must list.
			busy := fmt.Sprintf("%s: listing namespace %q", where, k.namespace)
			if err := f.lastErr.Load(); err != nil {
				busy += ": " + (*err).Error()
			}
			return busy
		case k.cluster != "" && f.lastErr.Load() == nil:
			// A member that cannot be reached keeps no one waiting.
			return where + ": not synced"
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settlePassed()
	k, e, n := c.items.Waiting()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s: waiting to observe %s of %s (%d writes pending in all)", c, e, Key(k), n)
}

func (c *Controller[T]) busy(requeueWithin time.Duration) string {
	if !c.active.Load() {
		if c.stopping.Load() {
			return c.String() + ": stopped"
		}
		if waiting := c.waitingFor(); waiting != "" {
			return fmt.Sprintf("%s: waiting for %s", c, waiting)
		}
		return fmt.Sprintf("%s: not running: starting, or this replica does not lead", c)
	}
	if b := idle.QueueBusy(c.q, requeueWithin); b != "" {
		return fmt.Sprintf("%s: %s", c, b)
	}
	return ""
}

// failing names the controller's failing keys, each with its last error.
func (c *Controller[T]) failing() error {
	entries := c.failures.Sorted(func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var errs []error
	if changed := c.misused.Load(); changed != nil {
		errs = append(errs, *changed)
	}
	return errors.Join(append(errs, idle.Failures(c, entries, c.q.RetryDue)...)...)
}
