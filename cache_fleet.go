package ctrl

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
)

// memberFeeds are a fleet cache's watches of one member cluster.
type memberFeeds[T Object] struct {
	feeds  []*feed[T]
	ctx    context.Context // canceled when the member leaves
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// runFleet runs the feeds of every member, engaged now or later, until ctx
// is done. A fleet cache reports itself synced at once: the manager's start
// does not wait for members, each of which is listed on its own.
func (c *Cache[T]) runFleet(ctx context.Context, log logr.Logger) {
	close(c.synced)
	c.fleetMu.Lock()
	c.running, c.runLog = ctx, log
	for _, mf := range c.members {
		c.startMember(mf)
	}
	c.fleetMu.Unlock()
	<-ctx.Done()
	c.fleetMu.Lock()
	c.running = nil
	c.fleetMu.Unlock()
	c.fleetRun.Wait()
}

// engage adds the feeds of member m, and starts them if the cache runs.
func (c *Cache[T]) engage(m *member) error {
	b, err := bindWith[T](c.mgr, m.bindings, m.clients, c.resource())
	if err != nil {
		return fmt.Errorf("ctrl: %s in cluster %q: %w", c, m.name, err)
	}
	mf := &memberFeeds[T]{}
	mf.ctx, mf.cancel = context.WithCancel(m.ctx)
	for _, ns := range feedNamespaces(c.currentScope()) {
		mf.feeds = append(mf.feeds, &feed[T]{c: c, b: b, cluster: m.name, namespace: ns})
	}
	c.fleetMu.Lock()
	defer c.fleetMu.Unlock()
	if old := c.members[m.name]; old != nil {
		old.cancel() // replaced: disengage waits for it
	}
	c.members[m.name] = mf
	if c.running != nil {
		c.startMember(mf)
	}
	return nil
}

// startMember runs a member's feeds. Called with c.fleetMu held.
func (c *Cache[T]) startMember(mf *memberFeeds[T]) {
	ctx, stop := context.WithCancel(c.running)
	context.AfterFunc(mf.ctx, stop)
	for _, f := range mf.feeds {
		log := c.runLog.WithValues("cluster", f.cluster)
		mf.wg.Add(1)
		c.fleetRun.Go(func() {
			defer mf.wg.Done()
			f.run(ctx, log)
		})
	}
}

// disengage stops the feeds of the member name and forgets its objects:
// they are not deleted, so no hook hears of them.
func (c *Cache[T]) disengage(name string) {
	c.fleetMu.Lock()
	mf := c.members[name]
	delete(c.members, name)
	c.fleetMu.Unlock()
	if mf == nil {
		return
	}
	mf.cancel()
	mf.wg.Wait()
	c.drop(forgotten, func(k Key) bool { return k.Cluster == name })
	for _, f := range mf.feeds {
		f.forgetMetrics()
	}
}

// memberFeedsOf returns the feeds of every engaged member.
func (c *Cache[T]) memberFeedsOf() map[string][]*feed[T] {
	c.fleetMu.Lock()
	defer c.fleetMu.Unlock()
	out := make(map[string][]*feed[T], len(c.members))
	for name, mf := range c.members {
		out[name] = mf.feeds
	}
	return out
}

// memberStates describes the members whose watches are not well, sorted.
func (c *Cache[T]) memberStates() []string {
	var out []string
	for cluster, feeds := range c.memberFeedsOf() {
		for _, f := range feeds {
			var state string
			switch {
			case !f.isSynced.Load():
				state = "not synced"
			case !f.connected.Load():
				state = "lost its watch"
			default:
				continue
			}
			if err := f.lastErr.Load(); err != nil {
				state += ": " + (*err).Error()
			}
			out = append(out, fmt.Sprintf("cluster %q: %s %s", cluster, c, state))
		}
	}
	slices.Sort(out)
	return out
}

// resource is the Resource option the cache was made with, for binding it
// in members.
func (c *Cache[T]) resource() APIResource { return resourceOption(c.b.Info) }
