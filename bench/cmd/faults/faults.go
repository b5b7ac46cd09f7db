package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// faultKind is what one fault does.
type faultKind int

const (
	// kill: SIGKILL the API server, wait -down, restart it and wait until
	// it is ready.
	kill faultKind = iota
	// pause: SIGSTOP the controller for -pause, then SIGCONT.
	pause
	// pauseKill: SIGSTOP the controller and kill the API server; wait
	// -down, restart it and wait until it is ready; then wait until it has
	// compacted etcd past the revision of the kill, and until the pause has
	// lasted -pause, and SIGCONT. The controller comes back without a
	// connection, to a watch position that is gone: 410 Gone, so it must
	// relist.
	//
	// A watch's position is what reached the client, not what the client
	// read: a paused controller's socket and HTTP/2 window keep taking
	// events, at this rate of small objects, until the connection is cut.
	// So the compaction that matters is one after the kill, and a restarted
	// API server compacts only on its second tick, to the revision of its
	// first: about two compaction intervals after it starts.
	pauseKill
)

func (k faultKind) String() string {
	return [...]string{"kill", "pause", "pause+kill"}[k]
}

// fault is one planned fault: what, and when it starts, after the start of
// the writes.
type fault struct {
	kind faultKind
	at   time.Duration
}

const (
	// restartGuess is about how long a restarted API server takes to be
	// ready, for spacing the faults; the schedule does not depend on it
	// being right.
	restartGuess = 4 * time.Second
	// lead is the time before the first fault, tail the time between the
	// expected end of the last fault and the end of the writes.
	lead, tail = 5 * time.Second, 5 * time.Second
)

// length is about how long a fault of kind k lasts.
func (c config) length(k faultKind) time.Duration {
	switch k {
	case kill:
		return c.down + restartGuess
	case pause:
		return c.pauseFor
	default:
		// The compactor starts a second or two after the API server
		// does, before it is ready.
		return max(c.pauseFor, c.down+2*c.compaction+2*time.Second)
	}
}

// plan spreads the faults over the writes, evenly, from lead after their
// start to tail before their end: kills and pauses alternating, and, if there
// are both, one of each merged into a pauseKill that comes last, so that the
// recovery measured is the one from 410 Gone. The schedule is the same for
// every run.
func plan(c config) ([]fault, error) {
	var kinds []faultKind
	kills, pauses := c.kills, c.pauses
	last := kills > 0 && pauses > 0
	if last {
		kills, pauses = kills-1, pauses-1
	}
	for kills+pauses > 0 {
		if kills > 0 {
			kinds, kills = append(kinds, kill), kills-1
		}
		if pauses > 0 {
			kinds, pauses = append(kinds, pause), pauses-1
		}
	}
	if last {
		kinds = append(kinds, pauseKill)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	var busy time.Duration
	for _, k := range kinds {
		busy += c.length(k)
	}
	free := c.duration - lead - tail - busy
	if free < 0 {
		return nil, fmt.Errorf("-duration %s is too short for the faults: they need about %s", c.duration, lead+busy+tail)
	}
	gap := time.Duration(0)
	if len(kinds) > 1 {
		gap = free / time.Duration(len(kinds)-1)
	}
	faults := make([]fault, len(kinds))
	at := lead
	for i, k := range kinds {
		faults[i] = fault{kind: k, at: at}
		at += c.length(k) + gap
	}
	return faults, nil
}

// describePlan says what the plan does, in one line per fault.
func describePlan(c config, faults []fault) []string {
	var lines []string
	for i, f := range faults {
		var what string
		switch f.kind {
		case kill:
			what = fmt.Sprintf("API server killed (SIGKILL), restarted %s later", secs(c.down))
		case pause:
			what = fmt.Sprintf("controller paused (SIGSTOP) for %s", secs(c.pauseFor))
		case pauseKill:
			what = fmt.Sprintf("controller paused (SIGSTOP) and API server killed (SIGKILL), restarted %s later; "+
				"the controller resumed once the restarted API server has compacted etcd past the revision of the kill, and at least %s after the pause",
				secs(c.down), secs(c.pauseFor))
		}
		lines = append(lines, fmt.Sprintf("%d. at %s: %s", i+1, secs(f.at.Round(time.Second/4)), what))
	}
	return lines
}

// event is something the driver did during a run, at an offset from the
// start of the writes.
type event struct {
	at   time.Duration
	what string
}

// inject carries out the faults, each at its time after t0, and returns
// what it did and when the last fault ended: when the API server was ready
// again and the controller running.
func (r *runner) inject(ctx context.Context, t0 time.Time, faults []fault) ([]event, time.Time, error) {
	var events []event
	note := func(what string) {
		at := time.Since(t0)
		events = append(events, event{at, what})
		logf("    %6.2fs %s", at.Seconds(), what)
	}
	restart := func(start time.Time) error {
		note("kill API server")
		if err := r.cp.StopAPIServer(); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start.Add(r.cfg.down)); err != nil {
			return err
		}
		note("start API server")
		if err := r.cp.StartAPIServer(); err != nil {
			return err
		}
		note("API server ready")
		return nil
	}
	// pauseFor pauses the controller, calls during, and resumes the
	// controller once the pause has lasted -pause.
	pauseFor := func(start time.Time, during func() error) error {
		note("pause controller")
		if err := r.ctl.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		if err := during(); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start.Add(r.cfg.pauseFor)); err != nil {
			return err
		}
		note("resume controller")
		return r.ctl.signal(syscall.SIGCONT)
	}
	var end time.Time
	for _, f := range faults {
		if err := sleepUntil(ctx, t0.Add(f.at)); err != nil {
			return events, end, err
		}
		start := time.Now()
		var err error
		switch f.kind {
		case kill:
			err = restart(start)
		case pause:
			err = pauseFor(start, func() error { return nil })
		case pauseKill:
			err = pauseFor(start, func() error {
				rv, err := r.revision(ctx)
				if err != nil {
					return err
				}
				if err := restart(start); err != nil {
					return err
				}
				if err := r.waitCompacted(ctx, rv); err != nil {
					return err
				}
				note("revision " + rv + " compacted")
				return nil
			})
		}
		if err != nil {
			return events, end, fmt.Errorf("%s at %s: %w", f.kind, f.at, err)
		}
		end = time.Now()
	}
	return events, end, nil
}

// sleepUntil waits until t or until ctx is done.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// revision returns the current etcd revision, as the resourceVersion of a
// list that the API server reads from etcd.
func (r *runner) revision(ctx context.Context) (string, error) {
	list, err := r.cs.CoreV1().ConfigMaps(r.cfg.namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	return list.ResourceVersion, nil
}

// waitCompacted waits until the server has compacted etcd past revision rv:
// a list at exactly rv is then 410 Gone.
func (r *runner) waitCompacted(ctx context.Context, rv string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := r.cs.CoreV1().ConfigMaps(r.cfg.namespace).List(ctx, metav1.ListOptions{
			ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 1})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("revision %s not compacted a minute after the restart (last: %v)", rv, err)
		}
		if err := sleepUntil(ctx, time.Now().Add(250*time.Millisecond)); err != nil {
			return err
		}
	}
}
