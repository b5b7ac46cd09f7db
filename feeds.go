package ctrl

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/go-logr/logr"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/objects"
	"github.com/typedctrl/ctrl/internal/scope"
	"github.com/typedctrl/ctrl/internal/shared"
)

// feedKey names a feed: one namespace ("" all) of one cluster ("" the own).

// wanted returns the feeds the inputs call for. Called with c.rewire held.
func (c *Cache[T]) wanted() map[feedKey]*binding.Binding[T] {
	out := map[feedKey]*binding.Binding[T]{}
	namespaces := c.currentScope().Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	switch {
	case c.opts.Fleet:
		for cluster, b := range c.members {
			for _, ns := range namespaces {
				out[feedKey{cluster, ns}] = b
			}
		}
	case c.opt != nil && c.served == "":
	default:
		for _, ns := range namespaces {
			out[feedKey{"", ns}] = c.b
		}
	}
	return out
}

// refeed moves the feeds to those the inputs want, with c.rewire held,
// starting them if the cache runs (before, they are planned, so a write
// made earlier is expected by the feed that lists it). A feed that stays
// is untouched; objects no feed reaches are removed as gone.
func (c *Cache[T]) refeed(gone eventKind) {
	c.refeeding.Store(true)
	defer c.refeeding.Store(false)
	want := c.wanted()
	var view *act.View
	if c.share != nil {
		view = c.share.View()
	}
	cur := c.feedMap()
	next := make(map[feedKey]*feed[T], len(want))
	var stopped []*feed[T]
	for k, f := range cur {
		if b, ok := want[k]; ok && f.b == b && f.view.Same(view) {
			next[k] = f
			continue
		}
		stopped = append(stopped, f)
	}
	kept := maps.Clone(next)
	c.feeds.Store(&kept) // from now on, writes are not tracked by the stopped feeds
	for _, f := range stopped {
		f.halt()
	}
	// What no wanted feed covers is out of the cache's reach now.
	covered := func(key Key) bool {
		for k := range want {
			if k.covers(key) {
				return true
			}
		}
		return false
	}
	var lost []feedKey
	for _, f := range stopped {
		if _, ok := want[f.key]; !ok {
			lost = append(lost, f.key)
			f.forgetMetrics()
		}
	}
	if len(lost) > 0 && c.running != nil {
		c.drop(gone, func(key Key) bool {
			return !covered(key) && slices.ContainsFunc(lost, func(k feedKey) bool { return k.covers(key) })
		})
	}
	for k, b := range want {
		if next[k] != nil {
			continue
		}
		f := &feed[T]{c: c, b: b, key: k, view: view}
		// A feed taking over held objects lists from where their feeds
		// were (or with a consistent read), never from "0".
		for _, old := range stopped {
			if old.done == nil || old.key.cluster != k.cluster ||
				old.key.namespace != "" && k.namespace != "" && old.key.namespace != k.namespace {
				continue
			}
			c.mu.RLock()
			rv := old.lastRV
			c.mu.RUnlock()
			switch {
			case !f.resume:
				f.resume, f.lastRV = true, rv
			case f.lastRV == "" || rv == "":
				f.lastRV = ""
			case objects.Newer(rv, f.lastRV):
				f.lastRV = rv
			}
		}
		next[k] = f
	}
	if c.running != nil {
		for _, f := range next {
			if f.done == nil {
				ctx, stop := context.WithCancel(c.running)
				f.stop, f.done = stop, make(chan struct{})
				c.feedRun.Go(func() {
					defer close(f.done)
					f.run(ctx)
				})
			}
		}
	}
	c.feeds.Store(&next)
}

func (f *feed[T]) halt() {
	if f.done != nil {
		f.stop()
		<-f.done
	}
}

// stopFeeds stops every feed, keeping what the cache holds. Under c.rewire.
func (c *Cache[T]) stopFeeds() {
	for _, f := range c.feedMap() {
		f.halt()
		f.forgetMetrics()
	}
	c.feeds.Store(nil)
}

// feedMap takes no lock: the store reads it under the cache's lock.
func (c *Cache[T]) feedMap() map[feedKey]*feed[T] {
	if p := c.feeds.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *Cache[T]) ownFeeds() []*feed[T] {
	var out []*feed[T]
	for k, f := range c.feedMap() {
		if k.cluster == "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *Cache[T]) feedOf(key Key) *feed[T] {
	feeds := c.feedMap()
	if f := feeds[feedKey{key.Cluster, key.Namespace}]; f != nil {
		return f
	}
	return feeds[feedKey{key.Cluster, ""}]
}

// run runs the cache's feeds until ctx is done, following its share.
func (c *Cache[T]) run(ctx context.Context, log logr.Logger) {
	c.mu.Lock()
	c.started = true
	c.transform = c.userTF
	if !c.opts.KeepManagedFields {
		user := c.userTF
		c.transform = func(obj T) T {
			obj.SetManagedFields(nil)
			if user != nil {
				obj = user(obj)
			}
			return obj
		}
	}
	c.log = log
	if shared.InTest() { // asked now: a manager built at package initialization precedes testing's flags
		c.guard()
	}
	c.mu.Unlock()
	if c.opts.Fleet {
		c.markSynced() // members list on their own: Start waits for none
	}
	c.rewire.Lock()
	c.running, c.runLog = ctx, log
	c.refeed(forgotten)
	c.rewire.Unlock()
	if c.opt != nil {
		c.feedRun.Go(func() { c.follow(ctx, log) })
	}
	for {
		var changed <-chan struct{}
		if c.share != nil {
			changed = c.share.View().Changed
		}
		select {
		case <-ctx.Done():
			c.rewire.Lock()
			c.running = nil
			c.stopFeeds()
			c.rewire.Unlock()
			c.feedRun.Wait()
			return
		case <-changed:
			c.rewire.Lock()
			if c.running != nil {
				c.refeed(forgotten)
			}
			c.rewire.Unlock()
		}
	}
}

// feedSynced: the cache has synced once every own-cluster feed has listed.
func (c *Cache[T]) feedSynced() {
	for _, f := range c.ownFeeds() {
		if !f.isSynced.Load() {
			return
		}
	}
	c.markSynced()
}

// markSynced: every feed listed, or an optional kind's server serves none.
func (c *Cache[T]) markSynced() {
	c.syncOnce.Do(func() { close(c.synced) })
}

func (c *Cache[T]) engage(mb *member) error {
	b, err := bindWith[T](c.mgr, mb.bindings, mb.clients, resourceOption(c.b.Info))
	if err != nil {
		return fmt.Errorf("ctrl: %s in cluster %q: %w", c, mb.name, err)
	}
	c.rewire.Lock()
	defer c.rewire.Unlock()
	c.members[mb.name] = b
	c.refeed(forgotten)
	return nil
}

// disengage forgets a member's objects: no hook hears of them.
func (c *Cache[T]) disengage(name string) {
	c.rewire.Lock()
	defer c.rewire.Unlock()
	if _, ok := c.members[name]; ok {
		delete(c.members, name)
		c.refeed(forgotten)
	}
}

// SetNamespaces changes the cache's namespaces, before or while the
// manager runs ("" or none: all); removed ones' objects are forgotten
// (Observable). Its controllers' [Owns] caches follow; [Watches] sources
// do not. It blocks until removed watches stopped, and returns an error
// for a cluster-scoped kind or a fleet cache.
func (c *Cache[T]) SetNamespaces(namespaces ...string) error {
	switch {
	case !c.b.Namespaced:
		return fmt.Errorf("ctrl: %s: SetNamespaces: the kind is cluster-scoped", c)
	case c.opts.Fleet:
		return fmt.Errorf("ctrl: %s: SetNamespaces: not supported for fleet caches", c)
	}
	ns := scope.Namespaces(namespaces)
	c.rewire.Lock()
	sc := c.currentScope()
	if slices.Equal(sc.Namespaces, ns) {
		c.rewire.Unlock()
		return nil
	}
	sc.Namespaces = ns
	c.namespaces.Store(&ns)
	c.mgr.rekey(c, sc.String())
	c.refeed(forgotten)
	c.rewire.Unlock()
	c.mgr.log.Info("cache namespaces changed", "cache", c.String())
	c.mu.RLock()
	handlers := c.handlers
	c.mu.RUnlock()
	for _, h := range handlers {
		if r, ok := h.(rescoper); ok {
			r.rescoped(ns)
		}
	}
	c.mgr.activity.Add(1)
	return nil
}

// rescoper follows its cache's namespaces: a controller, for its Owns.
type rescoper interface{ rescoped(namespaces []string) }
