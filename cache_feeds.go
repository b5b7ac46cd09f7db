package ctrl

import (
	"context"
	"slices"
)

// feedNamespaces returns the namespace of each watch: one per namespace, or
// "" for all.
func feedNamespaces(sc scope) []string {
	if len(sc.namespaces) == 0 {
		return []string{""}
	}
	return sc.namespaces
}

// newFeeds returns a feed of the own cluster for each namespace.
func (c *Cache[T]) newFeeds(namespaces []string) []*feed[T] {
	feeds := make([]*feed[T], len(namespaces))
	for i, ns := range namespaces {
		feeds[i] = &feed[T]{c: c, b: c.b, namespace: ns}
	}
	return feeds
}

// ownFeeds returns the own cluster's feeds.
func (c *Cache[T]) ownFeeds() []*feed[T] {
	c.fleetMu.Lock()
	defer c.fleetMu.Unlock()
	return c.feeds
}

// startFeed runs f on the cache's goroutines until the cache stops or
// stopFeeds stops it. Called with c.fleetMu held, while the cache runs.
func (c *Cache[T]) startFeed(f *feed[T]) {
	ctx, stop := context.WithCancel(c.running)
	f.stop, f.done = stop, make(chan struct{})
	log := c.runLog
	c.fleetRun.Go(func() {
		defer close(f.done)
		f.run(ctx, log)
	})
}

// stopFeeds stops the own cluster's feeds that keep does not keep, waits
// until they have returned (so that none of them changes the cache any
// more), and deletes their metrics. Called with c.rewire held.
func (c *Cache[T]) stopFeeds(keep func(*feed[T]) bool) {
	c.fleetMu.Lock()
	var stopped []*feed[T]
	kept := c.feeds[:0:0]
	for _, f := range c.feeds {
		if keep(f) {
			kept = append(kept, f)
		} else {
			stopped = append(stopped, f)
		}
	}
	c.feeds = kept
	c.fleetMu.Unlock()
	for _, f := range stopped {
		if f.stop != nil {
			f.stop()
			<-f.done
		}
		f.forgetMetrics()
	}
}

// startFeeds adds a feed for each namespace ("" for all) the own cluster
// has none for, and starts it if the cache runs. Called with c.rewire held.
func (c *Cache[T]) startFeeds(namespaces []string) {
	c.fleetMu.Lock()
	defer c.fleetMu.Unlock()
	for _, ns := range namespaces {
		if slices.ContainsFunc(c.feeds, func(f *feed[T]) bool { return f.namespace == ns }) {
			continue
		}
		f := &feed[T]{c: c, b: c.b, namespace: ns}
		c.feeds = append(c.feeds, f)
		if c.running != nil {
			c.startFeed(f)
		}
	}
}

// feedSynced records that a feed of the own cluster completed its first
// list: the cache has synced once every feed has.
func (c *Cache[T]) feedSynced() {
	for _, f := range c.ownFeeds() {
		if !f.isSynced.Load() {
			return
		}
	}
	c.markSynced()
}

// markSynced records that the cache is in step with the server: every feed
// listed, or, for an optional kind, the server serves none.
func (c *Cache[T]) markSynced() {
	c.syncOnce.Do(func() { close(c.synced) })
}

// feedOf returns the feed that watches key's cluster and namespace, or
// nil.
func (c *Cache[T]) feedOf(key Key) *feed[T] {
	var feeds []*feed[T]
	switch {
	case c.opts.Fleet:
		c.fleetMu.Lock()
		mf := c.members[key.Cluster]
		c.fleetMu.Unlock()
		if mf == nil {
			return nil
		}
		feeds = mf.feeds
	case key.Cluster != "":
		return nil
	default:
		feeds = c.ownFeeds()
	}
	for _, f := range feeds {
		if f.namespace == "" || f.namespace == key.Namespace {
			return f
		}
	}
	return nil
}
