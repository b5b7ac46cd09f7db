package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// reflector is client-go's Reflector without its hand-off: a watch event
// is read, decoded, stored and dispatched by one goroutine, this one, when
// the watch can be read that way (a binding.Stream, whose Next decodes the
// next event from the connection). client-go's StreamWatcher decodes on a
// goroutine of its own and hands each event over a channel, one more
// wake-up per event. Everything else is client-go's: a streamed initial
// list (sendInitialEvents) where the server and client allow it, else a
// paged list; a watch from the last resourceVersion seen, with bookmarks;
// a relist after 410 Gone or a watch that ends in an error; retries with
// backoff when the server refuses connections or answers 429.
type reflector struct {
	name  string
	lw    cache.ListerWatcherWithContext
	store cache.ReflectorStore
	log   logr.Logger
	delay wait.DelayFunc
	types []reflect.Type          // that a watch may send; empty: any
	gvk   schema.GroupVersionKind // of unstructured objects; empty: any
	// report is told of each error that ends a watch: one of its stream,
	// or an event of the wrong type.
	report func(error)
	// listMode is told how each list was made, and the error of a
	// streamed list the server refused.
	listMode func(streaming bool, refused error)

	useWatchList  bool
	quiet         time.Duration  // > 0: busy watches read from a connection of their own (conn.go)
	onOwn         bool           // the next watch opens on a connection of its own
	onMove        func(own bool) // optional: told of each move between connections
	lastRV        string         // of the last list, event or bookmark stored
	rvUnavailable bool           // the last list or watch at lastRV got 410 Gone or "too large"
	paginated     bool           // a list at resourceVersion "0" came in pages

	inliner Inliner   // of the store, if it runs work inline
	cycle   *cycle    // Run's loop, for a new reader to go on with
	baton   baton     // the inline run on the reader's goroutine (inline.go)
	gen     uint64    // of the last inline run; the reader's
	cur     *consumer // the watch read during the last inline run
	dog     watchdog  // hands the reading over from a long inline run
}

// The bounds of a watch's timeout, random between them so that a fleet of
// watches does not restart at once: client-go's.
const (
	minWatchTimeout = 5 * time.Minute
	maxWatchTimeout = 2 * minWatchTimeout
)

// events is a watch read on the caller's goroutine: binding.Stream. Next
// returns io.EOF when the watch ends normally.
type events interface {
	Next() (watch.Event, error)
	Stop()
}

// chanEvents reads a watch.Interface that delivers on a channel, as the
// fakes' do.
type chanEvents struct {
	ctx context.Context
	w   watch.Interface
}

func (c chanEvents) Next() (watch.Event, error) {
	select {
	case ev, ok := <-c.w.ResultChan():
		if !ok {
			return ev, io.EOF
		}
		return ev, nil
	case <-c.ctx.Done():
		return watch.Event{}, c.ctx.Err()
	}
}

func (c chanEvents) Stop() { c.w.Stop() }

var (
	errStopped = errors.New("stop requested")
	errBusy    = errors.New("busy: moving to a connection of its own")
	// errHandedOff ends a reader's loop: another goroutine reads on.
	errHandedOff = errors.New("reading handed over")
)

func newReflector(name string, lw cache.ListerWatcher, store cache.ReflectorStore, log logr.Logger, backoff wait.Backoff, quiet time.Duration) *reflector {
	r := &reflector{
		name:   name,
		lw:     cache.ToListerWatcherWithContext(lw),
		store:  store,
		log:    log,
		delay:  backoff.DelayWithReset(clock.RealClock{}, 2*time.Minute),
		quiet:  quiet,
		onOwn:  quiet > 0, // the first list is busy
		report: func(error) {},
	}
	r.useWatchList = clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) && !watchlist.DoesClientNotSupportWatchListSemantics(lw)
	return r
}

// openWatch opens a watch with opts, on a connection of its own if the
// last watch was busy; on the shared connection if the server did not
// answer there within the quiet bound.
func (r *reflector) openWatch(ctx context.Context, opts metav1.ListOptions) (events, error) {
	if r.onOwn {
		o, octx := newOwnWatch(ctx, r.quiet)
		w, err := r.lw.WatchWithContext(octx, opts)
		if err == nil && o.attach(asEvents(octx, w)) {
			return o, nil
		}
		o.Stop()
		if !o.quiet() {
			return nil, err
		}
		r.moved(o, nil)
	}
	w, err := r.lw.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	return asEvents(ctx, w), nil
}

func asEvents(ctx context.Context, w watch.Interface) events {
	if e, ok := w.(events); ok {
		return e
	}
	return chanEvents{ctx: ctx, w: w}
}

// moved notes where the next watch opens after w ended with err: back on
// the shared connection if w went quiet on its own, on one of its own if
// it was busy.
func (r *reflector) moved(w events, err error) {
	if o, ok := w.(*ownWatch); ok && o.quiet() {
		r.onOwn = false
		r.log.V(4).Info("watch quiet; resuming on the shared connection")
		if r.onMove != nil {
			r.onMove(false)
		}
	}
	if errors.Is(err, errBusy) {
		r.onOwn = true
		r.log.V(4).Info("watch busy; resuming on a connection of its own")
		if r.onMove != nil {
			r.onMove(true)
		}
	}
}

func timeoutSeconds() *int64 {
	s := int64((minWatchTimeout + rand.N(maxWatchTimeout-minWatchTimeout)).Seconds())
	return &s
}

// wait sleeps for the next backoff delay; false if ctx ended first.
func (r *reflector) wait(ctx context.Context) bool {
	t := time.NewTimer(r.delay())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// listAndWatch lists, then watches until the watch cannot resume, as
// client-go's ListAndWatchWithContext: it returns an error only when it
// could not list.
func (r *reflector) listAndWatch(ctx context.Context) error {
	var w events
	var refused error
	if r.useWatchList {
		var err error
		w, err = r.watchList(ctx)
		if w == nil && err == nil {
			return nil // stopped
		}
		if noStreaming(err) {
			// The server does not stream lists (its WatchList feature is
			// off): asking on every relist would only fail again.
			r.useWatchList, refused = false, err
		}
		if err != nil {
			r.log.V(4).Info("cannot stream the initial list; listing instead", "err", err.Error())
			w = nil
		}
	}
	if w == nil {
		if err := r.list(ctx); err != nil {
			return err
		}
	}
	if r.listMode != nil {
		r.listMode(w != nil, refused)
	}
	return r.watch(ctx, w)
}

// noStreaming reports whether err is an API server's refusal of a streamed
// list: 422 Invalid naming sendInitialEvents, where its WatchList feature
// is off. It is an answer, not an outage.
func noStreaming(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(st.Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == "sendInitialEvents" })
}

// retriable reports whether a watch that could not start is retried
// after a backoff: the server refused the connection, or answered 429.
func retriable(err error) bool {
	return utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)
}

// tooLarge reports whether the server does not have the resourceVersion
// asked for yet.
func tooLarge(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// relistRV is where a list starts: "0" (the server's cache) the first
// time, the last resourceVersion seen after, "" (a consistent read) once
// that is gone.
func (r *reflector) relistRV() string {
	switch {
	case r.rvUnavailable:
		return ""
	case r.lastRV == "":
		return "0"
	}
	return r.lastRV
}

// watchList streams the initial list: a watch with sendInitialEvents that
// begins with an ADDED event per object and a bookmark marking their end.
// It replaces the store's contents with them and returns the watch, which
// goes on with the changes.
func (r *reflector) watchList(ctx context.Context) (events, error) {
	var transform cache.TransformFunc
	if ts, ok := r.store.(cache.TransformingStore); ok {
		transform = ts.Transformer()
	}
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		rv := r.lastRV
		if r.rvUnavailable {
			rv = ""
		}
		start := time.Now()
		w, err := r.openWatch(ctx, metav1.ListOptions{
			ResourceVersion:      rv,
			AllowWatchBookmarks:  true,
			SendInitialEvents:    ptr.To(true),
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			TimeoutSeconds:       timeoutSeconds(),
		})
		if err == nil {
			initial := &listed{items: map[string]any{}, transform: transform}
			var ended bool
			ended, err = r.consume(ctx, start, w, initial, true, func(string, bool) bool { return false })
			r.moved(w, err)
			if err == nil && ended {
				r.rvUnavailable = false
				if err := r.store.Replace(initial.list(), initial.rv); err != nil {
					w.Stop()
					return nil, fmt.Errorf("unable to sync watch-list result: %w", err)
				}
				r.lastRV = initial.rv
				return w, nil
			}
			w.Stop()
			if errors.Is(err, errStopped) {
				return nil, nil
			}
			if err == nil {
				continue // the stream ended before the list did: again
			}
		}
		switch {
		case retriable(err):
			r.log.V(2).Info("streamed list failed; backing off", "err", err.Error())
			if !r.wait(ctx) {
				return nil, nil
			}
		case expired(err) || tooLarge(err):
			// The resourceVersion is gone, or not there yet: start over
			// from a consistent snapshot.
			r.rvUnavailable = true
		default:
			return nil, err
		}
	}
}

// listed collects a streamed initial list, as client-go's temporary store.
type listed struct {
	items     map[string]any
	rv        string
	transform cache.TransformFunc
}

func (l *listed) put(obj any) error {
	if l.transform != nil {
		var err error
		if obj, err = l.transform(obj); err != nil {
			return err
		}
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	l.items[key] = obj
	return nil
}

func (l *listed) Add(obj any) error    { return l.put(obj) }
func (l *listed) Update(obj any) error { return l.put(obj) }
func (l *listed) Delete(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	delete(l.items, key)
	return nil
}
func (l *listed) Bookmark(rv string) error { l.rv = rv; return nil }

func (l *listed) list() []any {
	out := make([]any, 0, len(l.items))
	for _, obj := range l.items {
		out = append(out, obj)
	}
	return out
}

// list lists in pages and replaces the store's contents.
func (r *reflector) list(ctx context.Context) error {
	opts := metav1.ListOptions{ResourceVersion: r.relistRV()}
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return r.lw.ListWithContext(ctx, opts)
	}))
	switch {
	case r.paginated:
		// The server pages lists at "0": its watch cache is off.
	case opts.ResourceVersion != "" && opts.ResourceVersion != "0":
		p.PageSize = 0 // one list, from the watch cache, as fresh as asked
	}
	list, paginated, err := p.ListWithAlloc(ctx, opts)
	if expired(err) || tooLarge(err) {
		r.rvUnavailable = true
		list, paginated, err = p.ListWithAlloc(ctx, metav1.ListOptions{ResourceVersion: r.relistRV()})
	}
	if err != nil {
		return fmt.Errorf("failed to list %s: %w", r.name, err)
	}
	if opts.ResourceVersion == "0" && paginated {
		r.paginated = true
	}
	r.rvUnavailable = false
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return fmt.Errorf("unable to understand list result %T: %w", list, err)
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return fmt.Errorf("unable to understand list result %T: %w", list, err)
	}
	found := make([]any, len(items))
	for i, it := range items {
		found[i] = it
	}
	if err := r.store.Replace(found, lm.GetResourceVersion()); err != nil {
		return fmt.Errorf("unable to sync list result: %w", err)
	}
	r.lastRV = lm.GetResourceVersion()
	return nil
}

// watch reads w (or a new watch from the last resourceVersion seen) into
// the store, and watches again when a watch ends normally. It returns
// when the watch cannot resume: the store must relist.
func (r *reflector) watch(ctx context.Context, w events) error {
	var cur *consumer
	if w != nil {
		// From a streamed list: every event after its bookmark is a change.
		cur = r.consumer(time.Now(), w, r.store, false, r.setRV(true))
	}
	return r.watching(ctx, cur)
}

// setRV records the resourceVersion to resume from. A watch from "" or
// "0" (resumes false) begins with synthetic ADDED events in no order of
// resourceVersion: none is recorded until they are over.
func (r *reflector) setRV(resumes bool) func(rv string, pastAdded bool) bool {
	return func(rv string, pastAdded bool) bool {
		if resumes || pastAdded {
			r.lastRV = rv
			return true
		}
		return false
	}
}

// watching is watch, going on with cur if it is set: a watch being read,
// perhaps by another goroutine until it handed the reading over. It
// returns errHandedOff, and leaves the watch open, if it handed the
// reading over itself.
func (r *reflector) watching(ctx context.Context, cur *consumer) (err error) {
	defer func() {
		if cur != nil && !errors.Is(err, errHandedOff) {
			cur.w.Stop()
		}
	}()
	for {
		if cur == nil {
			if ctx.Err() != nil {
				return nil
			}
			start := time.Now()
			opts := metav1.ListOptions{ResourceVersion: r.lastRV, TimeoutSeconds: timeoutSeconds(), AllowWatchBookmarks: true}
			resumes := opts.ResourceVersion != "" && opts.ResourceVersion != "0"
			w, err := r.openWatch(ctx, opts)
			if err != nil {
				if retriable(err) {
					r.log.V(4).Info("watch failed; backing off", "err", err.Error())
					if !r.wait(ctx) {
						return nil
					}
					continue
				}
				return err
			}
			// The store records the resourceVersion of each object it stores
			// and of each bookmark; the reflector keeps its own, to resume
			// from, without a call per event.
			cur = r.consumer(start, w, r.store, false, r.setRV(resumes))
		}
		_, err := cur.run(ctx)
		if errors.Is(err, errHandedOff) {
			return err
		}
		w := cur.w
		cur = nil
		w.Stop()
		r.moved(w, err)
		switch {
		case err == nil, errors.Is(err, errBusy):
			continue // ended normally, or moves: watch on from where it ended
		case errors.Is(err, errStopped):
		case expired(err):
			r.log.V(4).Info("watch closed", "err", err.Error())
		case apierrors.IsTooManyRequests(err):
			r.log.V(2).Info("watch returned 429; backing off")
			if !r.wait(ctx) {
				return nil
			}
			continue
		default:
			r.log.Info("watch ended with error", "err", err.Error())
		}
		return nil
	}
}

// eventStore is what consume writes to: the feed, or a streamed list.
type eventStore interface {
	Add(obj any) error
	Update(obj any) error
	Delete(obj any) error
}

// consume stores the events of w, in order, until it ends: it returns nil
// when it ended normally, and errStopped when ctx did. With listing, it
// returns (true, nil) at the bookmark that ends a streamed list's initial
// events, leaving w open. setRV gets each event's resourceVersion, and
// whether an event other than ADDED came since w began; it reports
// whether the watch could resume from there. A watch on the shared
// connection that is busy there returns errBusy, to resume on a
// connection of its own.
func (r *reflector) consume(ctx context.Context, start time.Time, w events, store eventStore, listing bool, setRV func(rv string, pastAdded bool) bool) (bool, error) {
	return r.consumer(start, w, store, listing, setRV).run(ctx)
}

// consumer is consume's state, out of the stack of the goroutine reading
// (see cycle).
type consumer struct {
	r       *reflector
	start   time.Time
	w       events
	store   eventStore
	inline  Inliner // the reflector's, if the store runs work inline; not while listing
	listing bool
	setRV   func(rv string, pastAdded bool) bool

	count     int
	pastAdded bool
	own       bool
	mayMove   bool
	window    time.Time
	inWindow  int

	// the last event stored, for what follows its storing
	rv    string
	ended bool
	// stored: the last event is stored, and the rest of its handling is
	// left to do (a reader that took over from an inline run).
	stored bool
}

func (r *reflector) consumer(start time.Time, w events, store eventStore, listing bool, setRV func(rv string, pastAdded bool) bool) *consumer {
	_, own := w.(*ownWatch)
	c := &consumer{r: r, start: start, w: w, store: store, listing: listing, setRV: setRV,
		own: own, mayMove: r.quiet > 0 && !own && !listing, window: start}
	if !listing {
		c.inline = r.inliner
	}
	return c
}

// run reads events until the watch ends, or until it hands the reading
// over during an inline run (errHandedOff): then c is the new reader's.
func (c *consumer) run(ctx context.Context) (bool, error) {
	r := c.r
	for {
		if !c.stored {
			ev, err := c.w.Next()
			if ctx.Err() != nil {
				return false, errStopped
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.report(err)
				return false, err
			}
			if ev.Type == watch.Error {
				return false, apierrors.FromObject(ev.Object)
			}
			if err := r.checkType(ev); err != nil {
				r.report(err)
				return false, err
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				r.log.Error(err, "unable to understand watch event", "type", ev.Type)
				continue
			}
			c.rv, c.ended = m.GetResourceVersion(), false
			store := c.store
			switch ev.Type {
			case watch.Added:
				err = store.Add(ev.Object)
			case watch.Modified:
				c.pastAdded = true
				err = store.Update(ev.Object)
			case watch.Deleted:
				c.pastAdded = true
				err = store.Delete(ev.Object)
			case watch.Bookmark:
				c.pastAdded = true
				c.ended = m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
				if bs, ok := store.(cache.ReflectorBookmarkStore); ok {
					err = bs.Bookmark(c.rv)
				}
			default:
				err = fmt.Errorf("unknown watch event type %q", ev.Type)
			}
			if err != nil {
				r.log.Error(err, "unable to store watch event", "type", ev.Type, "namespace", m.GetNamespace(), "name", m.GetName())
			}
			// What the store left to run inline runs before anything
			// else can end the loop: it holds a worker's place.
			if c.inline != nil {
				if run := c.inline.TakeInline(); run != nil {
					c.stored = true
					if r.runInline(c, run) {
						return false, errHandedOff
					}
				}
			}
		}
		c.stored = false
		resumable := c.setRV(c.rv, c.pastAdded)
		c.count++
		if c.listing && c.ended {
			return true, nil
		}
		if c.mayMove {
			if c.inWindow++; c.inWindow == busyEvents {
				now := time.Now()
				if resumable && now.Sub(c.window) < busyWindow {
					return false, errBusy
				}
				c.window, c.inWindow = now, 0
			}
		}
	}
	if c.count == 0 && time.Since(c.start) < time.Second && !(c.own && c.w.(*ownWatch).quiet()) {
		return false, &cache.VeryShortWatchError{Name: r.name}
	}
	return false, nil
}

// checkType refuses an event whose object is of none of the types the
// watch may send, as client-go's reflector does, but as the watch's error
// rather than a line in the log: in a streamed list, an object skipped
// would be missing from the cache until the next relist.
func (r *reflector) checkType(ev watch.Event) error {
	t := reflect.TypeOf(ev.Object)
	var got string
	switch u, ok := ev.Object.(*unstructured.Unstructured); {
	case len(r.types) > 0 && !slices.Contains(r.types, t):
		got = t.String()
	case ok && !r.gvk.Empty() && u.GroupVersionKind() != r.gvk:
		got = fmt.Sprintf("apiVersion %q, kind %q", u.GetAPIVersion(), u.GetKind())
	default:
		return nil
	}
	want := fmt.Sprint(r.types)
	if len(r.types) == 1 {
		want = r.types[0].String()
	}
	if !r.gvk.Empty() {
		apiVersion, kind := r.gvk.ToAPIVersionAndKind()
		want += fmt.Sprintf(" of apiVersion %q, kind %q", apiVersion, kind)
	}
	if m, err := meta.Accessor(ev.Object); err == nil {
		name := m.GetName()
		if ns := m.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		got += " " + name
	}
	return fmt.Errorf("%s: a %s event of %s, want %s", r.name, ev.Type, got, want)
}
