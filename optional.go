package ctrl

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/crd"
)

// crdResource is where the API server serves CustomResourceDefinitions.
var crdResource = APIResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
	Kind: "CustomResourceDefinition", ClusterScoped: true}

// optional is what a cache knows of its CRD, watched by name, unstructured.
type optional struct {
	crd     string // the CRD's name: <resource>.<group>
	version string
	kick    chan struct{} // the CRD changed
	kicks   atomic.Uint64 // changes of the CRD, and how many follow has acted on,
	acted   atomic.Uint64 // for the idle check
	ready   chan struct{} // closed once crds is set
	crds    *Cache[*unstructured.Unstructured]
	waiting atomic.Pointer[string] // why the cache waits, or nil while it is served
	gauge   prometheus.Gauge
}

func checkOptional(m *Manager, info binding.Info, opts CacheOptions) error {
	switch {
	case opts.Fleet:
		return fmt.Errorf("ctrl: cache of %s: Optional: fleet caches are not supported", info)
	case info.Builtin || info.GVR.Group == "":
		return fmt.Errorf("ctrl: cache of %s: Optional: the kind is built in, and always served", info)
	}
	// Bound now, so that a manager that cannot read CRDs fails when wiring.
	if _, err := bind[*unstructured.Unstructured](m, crdResource); err != nil {
		return fmt.Errorf("ctrl: cache of %s: Optional: watching its CustomResourceDefinition: %w", info, err)
	}
	return nil
}

func newOptional(m *Manager, info binding.Info) *optional {
	name := crdName(info)
	return &optional{
		crd:     name,
		version: info.GVR.Version,
		kick:    make(chan struct{}, 1),
		ready:   make(chan struct{}),
		gauge:   m.metrics.WaitingForCRD.WithLabelValues(name),
	}
}

// busy says why the cache is not idle: follow has not acted on a CRD change.
func (o *optional) busy() bool { return o.kicks.Load() != o.acted.Load() }

func (c *Cache[T]) watchCRD() error {
	o := c.opt
	crds, err := makeCache(c.mgr, CacheOptions{
		Resource:      crdResource,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", o.crd),
	}, use[*unstructured.Unstructured]{handler: kicker{o}, private: fmt.Sprintf("crd of %p", c), trim: crd.Trim})
	if err != nil {
		return fmt.Errorf("ctrl: cache of %s: Optional: watching its CustomResourceDefinition: %w", c, err)
	}
	o.crds = crds
	close(o.ready)
	return nil
}

func (o *optional) lastError() error {
	select {
	case <-o.ready:
		return o.crds.lastError()
	default:
		return nil
	}
}

type kicker struct{ o *optional }

func (k kicker) kick() {
	k.o.kicks.Add(1)
	select {
	case k.o.kick <- struct{}{}:
	default:
	}
}

func (k kicker) changed(event[*unstructured.Unstructured])  { k.kick() }
func (k kicker) listed([]event[*unstructured.Unstructured]) { k.kick() }

// follow runs the cache's feeds while its CRD is Established and serves
// the version, until ctx is done; each change of state is logged once.
func (c *Cache[T]) follow(ctx context.Context, log logr.Logger) {
	o := c.opt
	select {
	case <-o.ready:
	case <-ctx.Done():
		return
	}
	select {
	case <-o.crds.synced:
	case <-ctx.Done():
		return
	}
	log = log.WithValues("crd", o.crd)
	var serving types.UID // the CRD the feeds run for; "" while they do not
	for {
		kicks := o.kicks.Load()
		def, _ := o.crds.Get(Key{Name: o.crd})
		served, why := crd.State(def, o.version)
		if serving != "" && (!served || def.GetUID() != serving) {
			// A removed CRD's objects were deleted first (docs/why.md#optional-kinds).
			gone := forgotten
			if def == nil || def.GetUID() != serving {
				gone, why = deleted, "deleted"
			}
			c.rewire.Lock()
			c.served = ""
			c.refeed(gone)
			c.rewire.Unlock()
			serving = ""
		}
		if served && serving == "" {
			serving = def.GetUID()
			c.rewire.Lock()
			c.served = serving
			c.refeed(forgotten)
			c.rewire.Unlock()
			if o.waiting.Swap(nil) != nil {
				log.Info("CustomResourceDefinition is established: listing")
			}
			o.gauge.Set(0)
		}
		if !served {
			if was := o.waiting.Swap(&why); was == nil || *was != why {
				l := log
				if why == crd.NotEstablished {
					l = log.V(1) // a CRD just made: Established follows at once
				}
				l.Info("waiting for the CustomResourceDefinition", "reason", why, "controllers", c.users())
			}
			o.gauge.Set(1)
			c.markSynced() // in step with the server, which serves none
		}
		o.acted.Store(kicks)
		c.mgr.activity.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-o.kick:
		}
	}
}

func (c *Cache[T]) users() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, h := range c.handlers {
		if u, ok := h.(user); ok {
			out = append(out, u.user())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Served reports whether the API server serves the cache's kind, as far as
// the cache knows: false while an optional cache waits for its CRD or a
// required one's last list or watch got 404.
func (c *Cache[T]) Served() bool {
	if c.opt != nil {
		return c.opt.waiting.Load() == nil && c.HasSynced()
	}
	for _, f := range c.ownFeeds() {
		if f.notServed.Load() {
			return false
		}
	}
	return true
}

// waitingForCRD says, for /readyz, that the cache waits for its CRD, or "".
func (c *Cache[T]) waitingForCRD() string {
	o := c.opt
	if o == nil {
		return ""
	}
	why := o.waiting.Load()
	if why == nil {
		return ""
	}
	line := fmt.Sprintf("waiting for CustomResourceDefinition %s (%s): %s", o.crd, *why, c)
	if users := c.users(); len(users) > 0 {
		for i, u := range users {
			users[i] = strconv.Quote(u)
		}
		line += ", for controllers " + strings.Join(users, ", ")
	}
	return line
}

func crdName(info binding.Info) string { return info.GVR.Resource + "." + info.GVR.Group }

// notServedError names the CRD a 404 points at.
func (c *Cache[T]) notServedError(err error) error {
	if err == nil || !apierrors.IsNotFound(err) || c.b.Builtin || c.b.GVR.Group == "" {
		return err
	}
	return fmt.Errorf("CustomResourceDefinition %s is missing or does not serve %s: %w", crdName(c.b.Info), c.b.GVR.Version, err)
}
