package crd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Follower is what an optional cache knows of its CRD: Run turns the
// cache's feeds on while the CRD is Established and serves the version,
// and off when it stops doing so, through the cache's Hooks.
type Follower struct {
	Name    string // the CRD's: <resource>.<group>
	Version string
	kick    chan struct{}          // the CRD changed
	kicks   atomic.Uint64          // changes of the CRD, and how many Run has acted on,
	acted   atomic.Uint64          // for the idle check
	waiting atomic.Pointer[string] // why the cache waits, or nil while it is served
	gauge   prometheus.Gauge
}

// NewFollower returns the follower of CRD name for version; gauge is 1
// while the cache waits for the CRD.
func NewFollower(name, version string, gauge prometheus.Gauge) *Follower {
	return &Follower{Name: name, Version: version, kick: make(chan struct{}, 1), gauge: gauge}
}

// Hooks are what Run does to the cache.
type Hooks struct {
	// Get returns the CRD as cached, nil if there is none.
	Get func() *unstructured.Unstructured
	// Serve runs the feeds for the CRD of uid, or with uid "" stops them,
	// the objects they held deleted (the CRD was) or only forgotten.
	Serve func(uid types.UID, deleted bool)
	// Unserved says the cache is in step with a server that serves none.
	Unserved func()
	// Users names the controllers that wait, for the log.
	Users func() []string
	// Acted is called each time Run has acted on the CRD's changes.
	Acted func()
}

// Kick tells Run that the CRD changed. It never blocks.
func (f *Follower) Kick() {
	f.kicks.Add(1)
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Busy reports whether Run has not acted on a change of the CRD yet.
func (f *Follower) Busy() bool { return f.kicks.Load() != f.acted.Load() }

// Served reports whether Run found the CRD serving the version when it last looked.
func (f *Follower) Served() bool { return f.waiting.Load() == nil }

// Waiting says, for /readyz, that cache waits for the CRD, for the
// controllers users names, or "".
func (f *Follower) Waiting(cache string, users func() []string) string {
	why := f.waiting.Load()
	if why == nil {
		return ""
	}
	line := fmt.Sprintf("waiting for CustomResourceDefinition %s (%s): %s", f.Name, *why, cache)
	if users := users(); len(users) > 0 {
		for i, u := range users {
			users[i] = strconv.Quote(u)
		}
		line += ", for controllers " + strings.Join(users, ", ")
	}
	return line
}

// Run follows the CRD, from its cache synced, until ctx is done; each
// change of state is logged once.
func (f *Follower) Run(ctx context.Context, log logr.Logger, h Hooks) {
	log = log.WithValues("crd", f.Name)
	var serving types.UID // the CRD the feeds run for; "" while they do not
	for {
		kicks := f.kicks.Load()
		def := h.Get()
		served, why := State(def, f.Version)
		if serving != "" && (!served || def.GetUID() != serving) {
			// A removed CRD's objects were deleted first (docs/why.md#optional-kinds).
			deleted := def == nil || def.GetUID() != serving
			if deleted {
				why = "deleted"
			}
			h.Serve("", deleted)
			serving = ""
		}
		if served && serving == "" {
			serving = def.GetUID()
			h.Serve(serving, false)
			if f.waiting.Swap(nil) != nil {
				log.Info("CustomResourceDefinition is established: listing")
			}
			f.gauge.Set(0)
		}
		if !served {
			if was := f.waiting.Swap(&why); was == nil || *was != why {
				l := log
				if why == NotEstablished {
					l = log.V(1) // a CRD just made: Established follows at once
				}
				l.Info("waiting for the CustomResourceDefinition", "reason", why, "controllers", h.Users())
			}
			f.gauge.Set(1)
			h.Unserved()
		}
		f.acted.Store(kicks)
		h.Acted()
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		}
	}
}
