package ctrl

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/denied"
	"github.com/typedctrl/ctrl/internal/watcher"
)

// feedKey names a feed: one namespace ("" all) of one cluster.
type feedKey struct{ cluster, namespace string }

func (k feedKey) covers(key Key) bool {
	return key.Cluster == k.cluster && (k.namespace == "" || k.namespace == key.Namespace)
}

// feed is one list-and-watch of a cache (one namespace of one cluster) and
// its reflector's store; a new selection is a new feed.
type feed[T Object] struct {
	c      *Cache[T]
	b      *binding.Binding[T] // of the feed's cluster
	key    feedKey
	view   *act.View // what the cache's share selected when the feed started; nil: no share
	resume bool      // the cache holds the feed's objects already: list from lastRV

	lastRV     string       // resourceVersion of the latest event, list or bookmark; under c.mu
	lastEvent  atomic.Int64 // when, in Unix nanoseconds
	isSynced   atomic.Bool
	connected  atomic.Bool // the last list or watch worked
	lastErr    atomic.Pointer[error]
	fakeEvents atomic.Pointer[<-chan watch.Event]
	notServed  atomic.Bool // the last list or watch found the resource not served (404)
	relists    prometheus.Counter
	labels     []string     // of the feed's series: resource, namespace, cluster
	denied     denied.Verbs // what the server refuses the feed

	stop context.CancelFunc
	done chan struct{} // closed when run returns

	inline   inlineRun // the reader's: what its last event left to run inline
	inlining bool      // the reader runs what events leave in inline
}

// run lists and watches until ctx is done; while its share is unknown or
// empty it waits (empty: after removing what it held).
func (f *feed[T]) run(ctx context.Context) {
	switch v := f.view; {
	case v != nil && !v.Ready:
	case v != nil && v.None:
		f.c.mu.RLock()
		rv := f.lastRV
		f.c.mu.RUnlock()
		_ = f.Replace(nil, rv)
		f.markSynced()
	default:
		f.watch(ctx)
		return
	}
	<-ctx.Done()
}

func (f *feed[T]) watch(ctx context.Context) {
	c := f.c
	log := c.runLog
	if f.key.cluster != "" {
		log = log.WithValues("cluster", f.key.cluster)
	}
	res := c.b.GVR.Resource
	if c.b.GVR.Group != "" {
		res += "." + c.b.GVR.Group
	}
	name := c.String()
	if f.key.namespace != "" && c.currentScope().String() != fmt.Sprintf("in namespace %q", f.key.namespace) {
		name = fmt.Sprintf("%s (namespace %q)", c.b.Info, f.key.namespace)
		log = log.WithValues("namespace", f.key.namespace)
	}
	if f.key.cluster != "" {
		name = fmt.Sprintf("%s (cluster %q)", name, f.key.cluster)
	}
	f.labels = []string{res, f.key.namespace, f.key.cluster}
	target := denied.Target{Resource: f.b.GVR.GroupResource(), Namespaced: f.b.Namespaced, Namespace: f.key.namespace, Cluster: f.key.cluster}
	f.denied.Start(ctx, log, target, func(ctx context.Context) error {
		_, err := f.b.List(ctx, f.key.namespace, f.options(metav1.ListOptions{Limit: 1}))
		return err
	})
	defer f.denied.Wait()
	connected := c.mgr.metrics.WatchConnected.WithLabelValues(f.labels...)
	blind := c.mgr.metrics.Blind.WithLabelValues(f.labels...)
	f.relists = c.mgr.metrics.Relists.WithLabelValues(f.labels...)
	var own time.Duration
	if hc := c.mgr.httpOf(f.key.cluster); hc != nil && !f.b.Fake() {
		own = watcher.QuietBound(hc.Transport)
	}
	toOwn := c.mgr.metrics.WatchMoves.WithLabelValues(append(slices.Clone(f.labels), "own")...)
	toShared := c.mgr.metrics.WatchMoves.WithLabelValues(append(slices.Clone(f.labels), "shared")...)
	types := []reflect.Type{c.b.Info.Type}
	if p := c.b.Info.Projection; p != nil {
		types = append(types, p) // sent as JSON, projected by the store
	}
	watcher.Run(ctx, watcher.Config{
		Name:          name,
		ListerWatch:   f,
		Store:         f,
		Logger:        log,
		Types:         types,
		GVK:           c.b.Info.GVK(),
		OwnConnection: own,
		OnMove: func(toItsOwn bool) {
			if toItsOwn {
				toOwn.Inc()
			} else {
				toShared.Inc()
			}
		},
		OnListMode: func(streaming bool) { c.mgr.metrics.SetListMode(f.labels, streaming) },
		Inline:     f.inliner(),
		LastEvent:  func() time.Time { return time.Unix(0, f.lastEvent.Load()) },
		Resume:     f.resume,
		ResumeFrom: f.lastRV,
		OnConnected: func(ok bool, d time.Duration) {
			f.connected.Store(ok)
			if ok {
				f.notServed.Store(false)
				connected.Set(1)
				if d > 0 {
					blind.Observe(d.Seconds())
				}
				c.mgr.serverAnswered(f.key.cluster)
			} else {
				connected.Set(0)
			}
		},
		// An optional kind reports its CRD's 404s itself.
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

// The feed is the reflector's ListerWatcher, through the binding.

func (f *feed[T]) options(opts metav1.ListOptions) metav1.ListOptions {
	opts = f.view.Narrow(opts, f.c.scope.Labels)
	if s := f.c.scope.Fields; s != nil {
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
	l, err := f.b.List(ctx, f.key.namespace, f.options(opts))
	err = f.c.notServedError(err)
	f.denied.Note("list", err)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return l, nil
}

func (f *feed[T]) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		f.denied.Probe(ctx)
	}
	if f.b.Stream != nil {
		w, err := f.b.Stream(ctx, f.key.namespace, f.options(opts), binding.StreamOptions{KeepManagedFields: f.c.opts.KeepManagedFields, Report: f.report})
		err = f.c.notServedError(err)
		f.denied.Note("watch", err)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	w, err := f.b.Watch(ctx, f.key.namespace, f.options(opts))
	err = f.c.notServedError(err)
	f.denied.Note("watch", err)
	if err == nil && f.b.Fake() {
		ch := w.ResultChan()
		f.fakeEvents.Store(&ch)
		// A fake replays no deletions between list and watch: wait for the watch.
		f.markSynced()
	}
	return w, err
}

// report logs wiring problems a watch finds but decodes anyway.
func (f *feed[T]) report(err error) {
	f.c.log.Error(err, "cache decodes objects wrongly", "cluster", f.key.cluster, "namespace", f.key.namespace)
}

// IsWatchListSemanticsUnSupported tells the reflector that fakes cannot
// stream the initial list.
func (f *feed[T]) IsWatchListSemanticsUnSupported() bool { return f.b.Fake() }

func (f *feed[T]) markSynced() {
	if f.isSynced.CompareAndSwap(false, true) && f.key.cluster == "" {
		f.c.feedSynced()
	}
}

func (f *feed[T]) forgetMetrics() {
	if f.labels == nil {
		return
	}
	ms := f.c.mgr.metrics
	ms.WatchConnected.DeleteLabelValues(f.labels...)
	ms.Blind.DeleteLabelValues(f.labels...)
	ms.Relists.DeleteLabelValues(f.labels...)
	ms.ForgetListMode(f.labels)
	for _, conn := range []string{"own", "shared"} {
		ms.WatchMoves.DeleteLabelValues(append(slices.Clone(f.labels), conn)...)
	}
}

// Reconciles on the watch's reader.
//
// A controller whose workers all wait, whose queue is empty, and whose
// reconciles are short (watcher.Pace), reconciles the key a watch event
// queues on the goroutine that read the event, instead of waking a worker
// to do it: a worker's wake-up costs about a third of the controller's CPU
// per event when events come one at a time (BENCHMARKS.md). The key holds
// a worker's place meanwhile (Workers stays the bound on concurrent
// reconciles), and its reconcile goes through the same path as a worker's
// (Controller.serve). The reader hands the watch to a new goroutine as soon
// as the reconcile sends a request to the API server (which it would wait
// for), or once it has run for watcher.InlineBound without one, so a
// reconcile may block, on its own cache's next event too (package
// internal/watcher, inline.go). Fakes' watches are never read that way: a
// fake's watch holds 100 events, which a reconcile writing fast could fill
// while its reader reconciles.

// inlineRun is a key handed out to reconcile on the reader's goroutine.
type inlineRun struct {
	to   inlineServer
	key  Key
	item queued
}

// inlineServer reconciles a key handed out by its queue: a controller.
type inlineServer interface {
	serve(key Key, item queued, y watcher.Yield)
}

// inliner returns the feed's reconciles to run inline; nil for a fake.
func (f *feed[T]) inliner() watcher.Inliner {
	if f.b.Fake() {
		return nil
	}
	f.inlining = true
	return f
}

// offer returns where a handler may leave a key to reconcile inline after
// the event being dispatched, or nil. Called on the reader's goroutine.
func (f *feed[T]) offer() *inlineRun {
	if !f.inlining || f.inline.to != nil {
		return nil
	}
	return &f.inline
}

// inlineRuns recycles the runs TakeInline takes out of the feeds' slots.
var inlineRuns = sync.Pool{New: func() any { return new(inlineRun) }}

// TakeInline implements watcher.Inliner: the run leaves the slot before
// it starts, since the next event may fill the slot before it reads it.
func (f *feed[T]) TakeInline() watcher.Work {
	if f.inline.to == nil {
		return nil
	}
	run := inlineRuns.Get().(*inlineRun)
	*run, f.inline = f.inline, inlineRun{}
	return run
}

// RunInline implements watcher.Work.
func (run *inlineRun) RunInline(y watcher.Yield) {
	r := *run
	*run = inlineRun{}
	inlineRuns.Put(run)
	r.to.serve(r.key, r.item, y)
}
