// Package watcher runs a client-go Reflector for one cache: list, then
// watch, then relist when the watch cannot resume. It replaces the
// Reflector's own run loop so that ctrl decides how fast to retry and what
// to log: one line when the cache loses the API server, one when it is back.
package watcher

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Config describes one reflector.
type Config struct {
	Name        string         // for logs: the type and scope
	Type        runtime.Object // an example object of the expected type
	ListerWatch cache.ListerWatcher
	Store       cache.ReflectorStore
	Logger      logr.Logger
	// OnError is called with every error of a list or watch call, and of a
	// list-and-watch cycle.
	OnError func(error)
	// OnConnected is called with false when a list or watch fails after
	// having worked (or never having worked), and with true and the time
	// spent without a working list or watch when one works again.
	OnConnected func(connected bool, blind time.Duration)
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

// Run lists and watches until ctx is done.
func Run(ctx context.Context, cfg Config) {
	// The reflector's own logging is detail: demote it one level. It logs
	// both to its Logger option and to the logger in ctx.
	log := cfg.Logger.V(1)
	ctx = logr.NewContext(ctx, log)
	reflectorBackoff := Backoff // for retrying watches within a cycle
	lw := &tracking{ListerWatcher: cfg.ListerWatch, cfg: &cfg, log: cfg.Logger}
	r := cache.NewReflectorWithOptions(lw, cfg.Type, cfg.Store, cache.ReflectorOptions{
		Name:            cfg.Name,
		TypeDescription: cfg.Name,
		Logger:          &log,
		Backoff:         &reflectorBackoff,
	})
	backoff := Backoff // for retrying list-and-watch cycles
	var lastReturn time.Time
	for {
		err := r.ListAndWatchWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && cfg.OnError != nil && !lw.reported(err) {
			cfg.OnError(err) // an error of the cycle, not of a call
		}
		if lw.isConnected() {
			backoff = Backoff
		}
		// A watch that ended cleanly (410 Gone: its resource version was
		// compacted) is relisted at once; errors, and clean ends in quick
		// succession, wait.
		pause := time.Duration(0)
		if err != nil || time.Since(lastReturn) < time.Second {
			pause = backoff.Step()
		}
		lastReturn = time.Now()
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// tracking watches the outcome of every list and watch call, which is where
// an outage shows: the reflector retries failed watches internally and only
// logs them.
type tracking struct {
	cache.ListerWatcher
	cfg *Config
	log logr.Logger

	mu        sync.Mutex
	lastErr   error // the last error of a call, passed to OnError
	connected bool
	since     time.Time // when the current outage began
	started   bool
}

func (t *tracking) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := cache.ToListerWithContext(t.ListerWatcher).ListWithContext(ctx, opts)
	t.record(ctx, err)
	return obj, err
}

func (t *tracking) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := cache.ToWatcherWithContext(t.ListerWatcher).WatchWithContext(ctx, opts)
	t.record(ctx, err)
	return w, err
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

func (t *tracking) record(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // shutting down: not an outage
	}
	if err != nil && t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.lastErr = err
	}
	now := time.Now()
	switch {
	case err == nil && !t.connected:
		blind := time.Duration(0)
		if t.started {
			blind = now.Sub(t.since)
			t.log.Info("watch is back", "blind", blind.Round(time.Millisecond).String())
		}
		t.connected, t.started = true, true
		if t.cfg.OnConnected != nil {
			t.cfg.OnConnected(true, blind)
		}
	case err != nil && t.connected:
		t.log.Info("lost the watch; retrying", "err", err.Error())
		t.connected, t.since = false, now
		if t.cfg.OnConnected != nil {
			t.cfg.OnConnected(false, 0)
		}
	case err != nil && !t.started:
		t.log.Info("cannot list or watch; retrying", "err", err.Error())
		t.started, t.since = true, now
		if t.cfg.OnConnected != nil {
			t.cfg.OnConnected(false, 0)
		}
	}
}
