package ctrl

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/watcher"
)

// run lists and watches the feed's namespace until ctx is done. A sharded
// cache's feed lists and watches its replica's share, again each time the
// share changes, and nothing while it is empty.
func (f *feed[T]) run(ctx context.Context, log logr.Logger) {
	sc := f.c.scope.shard
	if sc == nil {
		f.watch(ctx, log)
		return
	}
	if !sc.s.waitMode(ctx) {
		return
	}
	if !sc.filters() {
		f.watch(ctx, log) // a related cache in label mode holds everything
		return
	}
	for ctx.Err() == nil {
		v := sc.s.current()
		f.relisting.Store(true)
		f.shardView.Store(v)
		if _, _, any := sc.selection(v); !any {
			// Nothing to watch: what the cache held is another's now.
			f.c.mu.RLock()
			rv := f.lastRV
			f.c.mu.RUnlock()
			_ = f.Replace(nil, rv)
			f.markSynced()
			f.relisting.Store(false)
			select {
			case <-ctx.Done():
			case <-v.changed:
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-v.changed:
			case <-wctx.Done():
			}
			cancel()
		}()
		f.watch(wctx, log)
		cancel()
	}
}

// watch lists and watches the feed's namespace until ctx is done.
func (f *feed[T]) watch(ctx context.Context, log logr.Logger) {
	c := f.c
	res := c.b.GVR.Resource
	if c.b.GVR.Group != "" {
		res += "." + c.b.GVR.Group
	}
	name := c.String()
	if f.namespace != "" && c.currentScope().String() != fmt.Sprintf("in namespace %q", f.namespace) {
		name = fmt.Sprintf("%s (namespace %q)", c.b.Info, f.namespace)
		log = log.WithValues("namespace", f.namespace)
	}
	if f.cluster != "" {
		name = fmt.Sprintf("%s (cluster %q)", name, f.cluster)
	}
	f.labels = []string{res, f.namespace, f.cluster}
	f.accessMu.Lock()
	f.log, f.ctx = log, ctx
	f.accessMu.Unlock()
	defer f.rechecks.Wait()
	connected := c.mgr.metrics.WatchConnected.WithLabelValues(f.labels...)
	blind := c.mgr.metrics.Blind.WithLabelValues(f.labels...)
	f.relists = c.mgr.metrics.Relists.WithLabelValues(f.labels...)
	var own time.Duration
	if hc := c.mgr.httpOf(f.cluster); hc != nil && !f.b.Fake() {
		own = watcher.QuietBound(hc.Transport)
	}
	toOwn := c.mgr.metrics.WatchMoves.WithLabelValues(append(slices.Clone(f.labels), "own")...)
	toShared := c.mgr.metrics.WatchMoves.WithLabelValues(append(slices.Clone(f.labels), "shared")...)
	watcher.Run(ctx, watcher.Config{
		Name:          name,
		ListerWatch:   f,
		Store:         f,
		Logger:        log,
		OwnConnection: own,
		OnMove: func(toItsOwn bool) {
			if toItsOwn {
				toOwn.Inc()
			} else {
				toShared.Inc()
			}
		},
		LastEvent: func() time.Time { return time.Unix(0, f.lastEvent.Load()) },
		OnConnected: func(ok bool, d time.Duration) {
			f.connected.Store(ok)
			if ok {
				f.notServed.Store(false)
				connected.Set(1)
				if d > 0 {
					blind.Observe(d.Seconds())
				}
				c.mgr.serverAnswered(f.cluster)
			} else {
				connected.Set(0)
			}
		},
		// An optional kind's 404s are its CRD's coming and going, which
		// the cache reports itself.
		Quiet: func(err error) bool { return c.opt != nil && apierrors.IsNotFound(err) },
		OnError: func(err error) {
			if apierrors.IsNotFound(err) {
				f.notServed.Store(true)
			}
			f.lastErr.Store(&err)
			c.mu.RLock()
			fn := c.onError
			c.mu.RUnlock()
			if fn != nil {
				fn(err)
			}
		},
	})
}

// The feed is the reflector's ListerWatcher: it lists and watches its
// namespace through the binding.

func (f *feed[T]) options(opts metav1.ListOptions) metav1.ListOptions {
	sel := f.c.scope.labels
	if sc := f.c.scope.shard; sc != nil {
		if v := f.shardView.Load(); v != nil {
			var req *labels.Requirement
			opts.ShardSelector, req, _ = sc.selection(v)
			if req != nil {
				all := labels.NewSelector()
				if sel != nil {
					reqs, _ := sel.Requirements()
					all = all.Add(reqs...)
				}
				sel = all.Add(*req)
			}
		}
	}
	if sel != nil {
		opts.LabelSelector = sel.String()
	}
	if s := f.c.scope.fields; s != nil {
		opts.FieldSelector = s.String()
	}
	return opts
}

func (f *feed[T]) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

func (f *feed[T]) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
}

func (f *feed[T]) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	l, err := f.b.List(ctx, f.namespace, f.options(opts))
	err = f.c.notServedError(err)
	f.access("list", err)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return l, nil
}

func (f *feed[T]) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		f.probeList(ctx)
	}
	if f.b.Stream != nil {
		w, err := f.b.Stream(ctx, f.namespace, f.options(opts), binding.StreamOptions{KeepManagedFields: f.c.opts.KeepManagedFields, Report: f.report})
		err = f.c.notServedError(err)
		f.access("watch", err)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	w, err := f.b.Watch(ctx, f.namespace, f.options(opts))
	err = f.c.notServedError(err)
	f.access("watch", err)
	if err == nil && f.b.Fake() {
		ch := w.ResultChan()
		f.fakeEvents.Store(&ch)
		// A fake replays changes made between its list and its watch, but
		// not deletions: a cache that reported sync after its list would
		// miss deletions made right after WaitForSync returned.
		f.markSynced()
		f.relisting.Store(false)
	}
	return w, err
}

// report logs what a watch finds wrong in the cache's wiring but decodes
// nonetheless.
func (f *feed[T]) report(err error) {
	f.c.log.Error(err, "cache decodes objects wrongly", "cluster", f.cluster, "namespace", f.namespace)
}

// IsWatchListSemanticsUnSupported tells the reflector that fakes cannot
// stream the initial list.
func (f *feed[T]) IsWatchListSemanticsUnSupported() bool { return f.b.Fake() }

func (f *feed[T]) markSynced() {
	if f.isSynced.CompareAndSwap(false, true) && f.cluster == "" {
		f.c.feedSynced()
	}
}

// forgetMetrics deletes the feed's series: its member left the fleet.
func (f *feed[T]) forgetMetrics() {
	if f.labels == nil {
		return
	}
	ms := f.c.mgr.metrics
	ms.WatchConnected.DeleteLabelValues(f.labels...)
	ms.Blind.DeleteLabelValues(f.labels...)
	ms.Relists.DeleteLabelValues(f.labels...)
	for _, conn := range []string{"own", "shared"} {
		ms.WatchMoves.DeleteLabelValues(append(slices.Clone(f.labels), conn)...)
	}
}
