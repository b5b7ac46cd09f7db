// Package watcher runs a client-go Reflector for one cache: list, then
// watch, then relist when the watch cannot resume. It replaces the
// Reflector's own run loop so that ctrl decides how fast to retry and what
// to log.
package watcher

import (
	"context"
	"math"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Config describes one reflector.
type Config struct {
	Name         string         // for logs: the type and scope
	Type         runtime.Object // an example object of the expected type
	ListerWatch  cache.ListerWatcher
	Store        cache.ReflectorStore
	ResyncPeriod time.Duration
	Logger       logr.Logger
	OnError      func(error) // every error that ended a list-and-watch
}

// Backoff is the delay between failed attempts to list or watch: short,
// jittered and capped at a few seconds, so a cache is back soon after the
// API server is, without a fleet of controllers retrying in lockstep.
var Backoff = wait.Backoff{
	Duration: 100 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Cap:      2 * time.Second,
	Steps:    math.MaxInt32,
}

// Run lists and watches until ctx is done.
func Run(ctx context.Context, cfg Config) {
	// The reflector's own logging is detail: demote it one level.
	log := cfg.Logger.V(1)
	backoff := Backoff
	r := cache.NewReflectorWithOptions(cfg.ListerWatch, cfg.Type, cfg.Store, cache.ReflectorOptions{
		Name:            cfg.Name,
		TypeDescription: cfg.Name,
		ResyncPeriod:    cfg.ResyncPeriod,
		Logger:          &log,
		Backoff:         &backoff,
	})
	clk := clock.RealClock{}
	delay := Backoff.DelayWithReset(clk, time.Minute)
	var lastReturn time.Time
	for {
		err := r.ListAndWatchWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && cfg.OnError != nil {
			cfg.OnError(err)
		}
		// A watch that ended cleanly (410 Gone: its resource version was
		// compacted) is relisted at once; errors, and clean ends in quick
		// succession, wait.
		wait := time.Duration(0)
		if err != nil || clk.Since(lastReturn) < time.Second {
			wait = delay()
		}
		lastReturn = clk.Now()
		if wait > 0 {
			t := clk.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}
}
