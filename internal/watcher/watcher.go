// Package watcher lists and watches for one cache: list, then watch, then
// relist when the watch cannot resume. Its reflector is client-go's
// without the goroutine between the connection and the cache (watch.go);
// its run loop is ctrl's, so that ctrl decides how fast to retry and what
// to log: one line when the cache loses the API server, one when it is back.
//
// Retries are fast: a failed list or watch is retried after 100 ms, doubling
// to a cap of 1 to 1.5 s (jittered). During an outage a cache therefore
// costs the server, or whatever answers in its place, under one connection
// attempt a second; a server that answers 429 or 503 with Retry-After is
// left alone for as long as it asks. After the server was unreachable, the
// relist each cache needs (its watch position is usually gone) waits a
// random part of RelistSpread more, so that a fleet reconnecting at once
// spreads its lists; a cache whose connection alone died relists at once.
package watcher

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Config describes one reflector.
type Config struct {
	Name        string // for logs: the type and scope
	ListerWatch cache.ListerWatcher
	Store       cache.ReflectorStore
	Logger      logr.Logger
	// LastEvent returns when the store last received an event, a list or a
	// bookmark: where the blindness of a watch that died silently began.
	LastEvent func() time.Time
	// Types are the Go types a watch may send (a projection's may send
	// the type it projects, and the store project it): an event of any
	// other type ends the watch with an error, which OnError gets, as
	// client-go's reflector checks its expected type. Empty: not checked.
	Types []reflect.Type
	// GVK is the group, version and kind of the objects: checked, like
	// Types, for objects whose Go type does not say it
	// (*unstructured.Unstructured).
	GVK schema.GroupVersionKind
	// OnError is called with every error of a list or watch call, of a
	// watch stream, and of a list-and-watch cycle, once each.
	OnError func(error)
	// OnConnected is called with false when a list or watch fails after
	// having worked (or never having worked), and with true and the time
	// spent without a working list or watch when one works again.
	OnConnected func(connected bool, blind time.Duration)
	// Quiet reports the errors not to log, because the caller reports
	// them: an optional kind's 404s, which its CustomResourceDefinition
	// explains; a 404 among them is retried at Settling's pace. Nil:
	// every error is logged.
	Quiet func(error) bool
	// OwnConnection, when positive, lets a busy watch read from a
	// connection of its own, as Route marks it, and is how long the
	// watch may go without an event there before it resumes on the
	// shared connection (conn.go). The transport must be a Route's.
	OwnConnection time.Duration
	// OnMove, if set, is called each time a watch resumes on another
	// connection: own true when it moved to a connection of its own
	// (busy), false when it moved back to the shared one (quiet).
	OnMove func(own bool)
	// OnListMode, if set, is called after each list with how it was made:
	// streaming (a watch that sends the objects first, client-go's
	// WatchList) or in pages, where the client or the API server does not
	// stream. A server that refuses a streamed list is logged once, and
	// listed in pages from then on.
	OnListMode func(streaming bool)
	// Resume is set for a store that already holds objects: its first
	// list is not older than ResumeFrom, or, with ResumeFrom empty, a
	// consistent read. A fresh reflector lists at "0", which a lagging
	// watch cache may answer: right for an empty store only.
	Resume     bool
	ResumeFrom string
	// Inline, if set, is the store's work to run on the reader's
	// goroutine after an event (inline.go).
	Inline Inliner
}

// Backoff is the delay between failed attempts to list or watch: short,
// jittered and capped below a second and a half, so a cache is back soon
// after the API server is, without a fleet of controllers retrying in
// lockstep.
var Backoff = wait.Backoff{
	Duration: 100 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Cap:      time.Second,
	Steps:    math.MaxInt32,
}

// RelistSpread bounds the random wait before the first relist after an
// outage.
const RelistSpread = 2 * time.Second

// NotServed is the delay between list-and-watch cycles that end because
// the server does not serve the resource (404 Not Found: its
// CustomResourceDefinition was deleted). The first retries are as quick as
// Backoff's, so a CRD being replaced costs little; a CRD that stays gone
// costs the server a list every 20 to 30 seconds, not every second.
var NotServed = wait.Backoff{
	Duration: 100 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Cap:      20 * time.Second,
	Steps:    math.MaxInt32,
}

// Settling is the delay between cycles that end in a 404 the caller
// expects to pass (Config.Quiet): an optional kind's just after its CRD
// became Established, while the API server sets up the resource's handler
// (a second, measured, after a CRD is created again). Retries come every
// 100 to 650 ms in the first few seconds, so the cache lists soon after the
// server serves, and then slow down to NotServed's pace.
var Settling = wait.Backoff{
	Duration: 100 * time.Millisecond,
	Factor:   1.2,
	Jitter:   0.5,
	Cap:      20 * time.Second,
	Steps:    math.MaxInt32,
}

// Forbidden is the delay between list-and-watch cycles the server refuses
// (403 Forbidden): the server answered, so this is no outage, and asking
// again soon only helps once someone grants the permission. A cache
// allowed to list but not to watch relists the whole type each cycle:
// that is why the delay grows to half a minute.
var Forbidden = wait.Backoff{
	Duration: time.Second,
	Factor:   2,
	Jitter:   0.1,
	Cap:      30 * time.Second,
	Steps:    math.MaxInt32,
}

// Run lists and watches until ctx is done. It returns once the watch is
// no longer read: an inline run the reading was handed away from (see
// inline.go) may still be running then.
func Run(ctx context.Context, cfg Config) {
	lw := &tracking{ListerWatcher: cfg.ListerWatch, cfg: &cfg, log: cfg.Logger}
	// The reflector's own logging is detail: demote it one level.
	r := newReflector(cfg.Name, lw, cfg.Store, cfg.Logger.V(1).WithName(cfg.Name), Backoff, cfg.OwnConnection)
	r.onMove = cfg.OnMove
	r.listMode = func(streaming bool, refused error) {
		if refused != nil {
			cfg.Logger.Info("the API server does not stream lists; listing in pages", "err", refused.Error())
		}
		if cfg.OnListMode != nil {
			cfg.OnListMode(streaming)
		}
	}
	r.types, r.gvk = cfg.Types, cfg.GVK
	r.report = func(err error) {
		if cfg.OnError != nil && !lw.reported(err) {
			cfg.OnError(err)
		}
	}
	if cfg.Resume {
		r.lastRV, r.rvUnavailable = cfg.ResumeFrom, cfg.ResumeFrom == ""
	}
	c := &cycle{r: r, lw: lw, cfg: &cfg, ctx: ctx, finished: make(chan struct{}),
		backoff: Backoff, notServed: NotServed, settling: Settling, forbidden: Forbidden}
	r.cycle, r.inliner = c, cfg.Inline
	if cfg.Inline == nil {
		c.run(nil) // nothing runs inline: the reading never moves
		return
	}
	r.dog.init(r)
	defer r.dog.stop()
	go c.run(nil)
	<-c.finished
}

// cycle is Run's list-and-watch loop, its state out of any goroutine's
// stack: the reading moves to a new goroutine when an inline run takes too
// long (inline.go), which goes on from where the last one stopped.
type cycle struct {
	r        *reflector
	lw       *tracking
	cfg      *Config
	ctx      context.Context
	finished chan struct{} // closed when the loop is over

	backoff    wait.Backoff // for retrying list-and-watch cycles
	notServed  wait.Backoff
	settling   wait.Backoff
	forbidden  wait.Backoff
	lastReturn time.Time
}

// run runs the loop until ctx is done, from the watch resume was reading
// if it is set; it returns early, leaving the loop to another goroutine,
// if the reading moved away during an inline run.
func (c *cycle) run(resume *consumer) {
	ctx, r, cfg, lw := c.ctx, c.r, c.cfg, c.lw
	for {
		var err error
		if resume != nil {
			err = r.watching(ctx, resume)
			resume = nil
		} else {
			err = r.listAndWatch(ctx)
		}
		if errors.Is(err, errHandedOff) {
			return
		}
		if ctx.Err() != nil {
			break
		}
		if expired(err) {
			err = nil // the server answered: the cache must relist, that is all
		}
		if err != nil && cfg.OnError != nil && !lw.reported(err) {
			cfg.OnError(err) // an error of the cycle, not of a call
		}
		if lw.isConnected() {
			c.backoff = Backoff
		}
		// A watch that cannot resume (410 Gone: its resource version was
		// compacted, or the server restarted) is relisted at once, unless
		// an outage just ended; errors, and ends in quick succession, wait.
		notFound := apierrors.IsNotFound(err)
		quiet := notFound && cfg.Quiet != nil && cfg.Quiet(err)
		pause := time.Duration(0)
		switch {
		case lw.recovered():
			pause = rand.N(RelistSpread)
		case quiet:
			pause = c.settling.Step()
		case err != nil || time.Since(c.lastReturn) < time.Second:
			pause = c.backoff.Step()
		}
		if d := lw.suggestedDelay(err); d > pause {
			pause = d
		}
		if notFound && !quiet {
			pause = max(pause, c.notServed.Step())
		}
		if !notFound {
			c.notServed, c.settling = NotServed, Settling
		}
		if apierrors.IsForbidden(err) {
			pause = max(pause, c.forbidden.Step())
		} else {
			c.forbidden = Forbidden
		}
		c.lastReturn = time.Now()
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	close(c.finished)
}

// tracking watches the outcome of every list and watch call, and of every
// watch stream, which is where an outage shows: the reflector retries
// failed watches internally and only logs them.
type tracking struct {
	cache.ListerWatcher
	cfg *Config
	log logr.Logger

	mu         sync.Mutex
	lastErr    error // the last error of a call, passed to OnError
	connected  bool
	since      time.Time // when the current outage began
	started    bool
	justBack   bool          // an outage of the server ended in this list-and-watch cycle
	refused    bool          // a call failed in the current outage: the server was unreachable
	retryAfter time.Duration // the server's Retry-After, from the last failed call
	quiet      bool          // the current outage began with an error Quiet, and goes unsaid
}

func (t *tracking) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if err := t.beforeList(ctx); err != nil {
		return nil, err
	}
	obj, err := cache.ToListerWithContext(t.ListerWatcher).ListWithContext(ctx, opts)
	t.record(ctx, err)
	return obj, err
}

func (t *tracking) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents { // a streamed list
		if err := t.beforeList(ctx); err != nil {
			return nil, err
		}
	}
	w, err := cache.ToWatcherWithContext(t.ListerWatcher).WatchWithContext(withStreamReporter(ctx, t.streamFailed), opts)
	if noStreaming(err) {
		t.record(ctx, nil) // the server answered; the reflector lists instead
	} else {
		t.record(ctx, err)
	}
	return w, err
}

// beforeList spreads the lists of a fleet coming back from an outage of
// the server. An API server that restarts holds the requests that reach it
// while it starts and answers them together: if they were lists, every
// cache of every replica would list in the same instant. So during an
// outage a cache asks first for one object, and once that is answered,
// if the server had been unreachable, waits a random part of RelistSpread
// before it lists. A cache whose connection alone died (the server
// answers at once) lists at once.
func (t *tracking) beforeList(ctx context.Context) error {
	t.mu.Lock()
	outage, refused := t.started && !t.connected, t.refused
	t.mu.Unlock()
	if !outage {
		return nil
	}
	_, err := cache.ToListerWithContext(t.ListerWatcher).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	t.record(ctx, err)
	if err != nil && !apierrors.IsForbidden(err) { // a refusal is an answer: the server is back
		return err
	}
	t.recovered() // this is the spread, if any
	if !refused {
		return nil
	}
	defer holdClock(ctx)() // the wait is not the connection's silence
	timer := time.NewTimer(rand.N(RelistSpread))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says.
func (t *tracking) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(t.ListerWatcher)
}

// reported reports whether err is, or wraps, the last error of a list or
// watch call, which OnError has seen.
func (t *tracking) reported(err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr != nil && errors.Is(err, t.lastErr)
}

func (t *tracking) isConnected() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.connected
}

// recovered reports, once, that an outage ended since it was last asked.
func (t *tracking) recovered() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	back := t.justBack
	t.justBack = false
	return back
}

// suggestedDelay is how long the server asked to be left alone: the
// Retry-After of a 429 or 503 answer to the cycle or its last call.
func (t *tracking) suggestedDelay(err error) time.Duration {
	t.mu.Lock()
	d := t.retryAfter
	t.retryAfter = 0
	t.mu.Unlock()
	if s, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(s)*time.Second > d {
		d = time.Duration(s) * time.Second
	}
	return d
}

func (t *tracking) record(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // shutting down: not an outage
	}
	if expired(err) {
		err = nil // an answer: the watch must relist, not an outage
	}
	if err != nil && t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if apierrors.IsForbidden(err) {
		// The server answered, and refused: no outage begins or ends
		// here, whatever worked before. The caller reports refusals.
		t.lastErr = err
		return
	}
	if err != nil {
		t.lastErr = err
		t.refused = true
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			t.retryAfter = time.Duration(s) * time.Second
		}
	}
	now := time.Now()
	switch {
	case err == nil && !t.connected:
		blind := time.Duration(0)
		if t.started {
			blind = now.Sub(t.since)
			if !t.quiet {
				t.log.Info("watch is back", "blind", blind.Round(time.Millisecond).String())
			}
			t.justBack = t.refused
		}
		t.refused = false
		t.connected, t.started = true, true
		if t.cfg.OnConnected != nil {
			t.cfg.OnConnected(true, blind)
		}
	case err != nil && t.connected:
		t.lost(err, now)
	case err != nil && !t.started:
		if t.quiet = t.cfg.Quiet != nil && t.cfg.Quiet(err); !t.quiet {
			t.log.Info("cannot list or watch; retrying", "err", err.Error())
		}
		t.started, t.since = true, now
		if t.cfg.OnConnected != nil {
			t.cfg.OnConnected(false, 0)
		}
	}
}

// lost records an outage that began at since. Called with t.mu held.
func (t *tracking) lost(err error, since time.Time) {
	if t.quiet = t.cfg.Quiet != nil && t.cfg.Quiet(err); !t.quiet {
		t.log.Info("lost the watch; retrying", "err", err.Error())
	}
	t.connected, t.since = false, since
	if t.cfg.OnConnected != nil {
		t.cfg.OnConnected(false, 0)
	}
}

// streamFailed records a watch stream that ended with an error, such as a
// connection found dead: the cache has been blind since its last event.
func (t *tracking) streamFailed(err error) {
	if t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = err
	if !t.connected {
		return
	}
	since := time.Now()
	if t.cfg.LastEvent != nil {
		if last := t.cfg.LastEvent(); !last.IsZero() && last.Before(since) {
			since = last
		}
	}
	t.lost(err, since)
}

// expired reports whether err says a watch's resource version is gone.
func expired(err error) bool {
	return err != nil && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err))
}
