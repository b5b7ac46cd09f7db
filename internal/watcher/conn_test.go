package watcher

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestWatchMovesBetweenConnections drives a watch from its own connection
// (the streamed list) back to the shared one when it goes quiet, to its
// own again when it is busy, and back when quiet: each move stops the
// watch and its request, and resumes from the last resourceVersion seen,
// so the store sees every change once, in order, and nothing is listed
// again.
func TestWatchMovesBetweenConnections(t *testing.T) {
	defer goleak.VerifyNone(t)
	type request struct {
		opts metav1.ListOptions
		own  bool
		ctx  context.Context
		w    *watch.FakeWatcher
	}
	requests := make(chan request, 10)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			t.Error("listed: nothing should be listed again")
			return &corev1.ConfigMapList{}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(2*busyEvents, false)
			requests <- request{opts, ctx.Value(ownConnKey{}) != nil, ctx, w}
			return w, nil
		},
	}
	store := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	const quiet = 400 * time.Millisecond
	var moves []bool // OnMove's calls: true to own
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: lw, Store: store, Logger: logr.Discard(), OwnConnection: quiet,
			OnMove: func(own bool) { moves = append(moves, own) }})
	}()
	defer func() {
		cancel()
		<-done
	}()
	next := func(want string) request {
		t.Helper()
		select {
		case r := <-requests:
			got := fmt.Sprintf("rv=%q initial=%v own=%v", r.opts.ResourceVersion, r.opts.SendInitialEvents != nil, r.own)
			if got != want {
				t.Errorf("watch request: %s, want %s", got, want)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch request; want %s", want)
		}
		return request{}
	}
	ended := func(r request) {
		t.Helper()
		if !r.w.IsStopped() || r.ctx.Err() == nil {
			t.Errorf("a watch that moved: stopped %v, request canceled %v; want both", r.w.IsStopped(), r.ctx.Err() != nil)
		}
	}

	// The streamed list is busy: on a connection of its own. Once quiet,
	// the watch resumes on the shared connection.
	r := next(`rv="" initial=true own=true`)
	began := time.Now()
	r.w.Add(cm("a", "10"))
	r.w.Action(watch.Bookmark, bookmark("11", true))
	r2 := next(`rv="11" initial=false own=false`)
	if took := time.Since(began); took < quiet/2 {
		t.Errorf("left its own connection %s after its last event, want after at least %s", took, quiet/2)
	}
	ended(r)

	// Busy on the shared connection: busyEvents events within a second
	// move it.
	rv := 11
	for range busyEvents {
		rv++
		r2.w.Modify(cm("a", strconv.Itoa(rv)))
	}
	r3 := next(fmt.Sprintf(`rv="%d" initial=false own=true`, rv))
	if !r2.w.IsStopped() {
		t.Error("the busy watch on the shared connection was not stopped")
	}
	rv++
	r3.w.Modify(cm("a", strconv.Itoa(rv)))
	next(fmt.Sprintf(`rv="%d" initial=false own=false`, rv))
	ended(r3)

	cancel()
	<-done
	if want := []bool{false, true, false}; !slices.Equal(moves, want) {
		t.Errorf("OnMove calls (true: to its own connection) %v, want %v", moves, want)
	}
	want := []string{"replace [a@10] at 11"}
	for v := 12; v <= rv; v++ {
		want = append(want, fmt.Sprintf("update a@%d", v))
	}
	if got := store.all(); !slices.Equal(got, want) {
		t.Errorf("store saw %d operations:\n%s\nwant %d:\n%s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
}

// TestWatchStaysWhenSlow checks that a watch on the shared connection
// whose events come slower than busyEvents a second stays there.
func TestWatchStaysWhenSlow(t *testing.T) {
	defer goleak.VerifyNone(t)
	requests := make(chan *watch.FakeWatcher, 10)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if opts.SendInitialEvents != nil {
				return nil, fmt.Errorf("not supported")
			}
			if ctx.Value(ownConnKey{}) != nil {
				t.Error("a slow watch moved to a connection of its own")
			}
			w := watch.NewFakeWithChanSize(2*busyEvents, false)
			requests <- w
			return w, nil
		},
	}
	store := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := newReflector("configmaps", lw, store, logr.Discard(), Backoff, time.Minute)
		r.onOwn = false
		_ = r.listAndWatch(ctx)
	}()
	var w *watch.FakeWatcher
	select {
	case w = <-requests:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch")
	}
	// busyEvents events, the last after more than a second.
	for i := range busyEvents {
		if i == busyEvents-1 {
			waitFor(t, "the events before the last", func() bool { return len(store.all()) == busyEvents })
			time.Sleep(busyWindow) // the events' pace is what is tested, not the reflector's
		}
		w.Modify(cm("a", strconv.Itoa(i+2)))
	}
	waitFor(t, "every event", func() bool { return len(store.all()) == busyEvents+1 })
	if w.IsStopped() || len(requests) > 0 {
		t.Error("the slow watch was moved")
	}
	cancel()
	<-done
}

// TestRoute checks that Route sends the requests marked for a connection
// of their own to own, the others to shared, and that QuietBound finds
// the bound below client-go's wrappers.
func TestRoute(t *testing.T) {
	var got []string
	rt := func(name string) http.RoundTripper {
		return roundTripper(func(*http.Request) (*http.Response, error) {
			got = append(got, name)
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		})
	}
	r := Route(rt("shared"), rt("own"), 3*time.Second)
	for _, ctx := range []context.Context{context.Background(), onOwn(context.Background(), nil)} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1/api", nil)
		if _, err := WrapTransport(r).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"shared", "own"}; !slices.Equal(got, want) {
		t.Errorf("sent to %v, want %v", got, want)
	}
	if q := QuietBound(WrapTransport(r)); q != 3*time.Second {
		t.Errorf("QuietBound = %s, want 3s", q)
	}
	if q := QuietBound(WrapTransport(rt("shared"))); q != 0 {
		t.Errorf("QuietBound of a transport without a Route = %s, want 0", q)
	}
}

// TestUnansweredOwnWatchMoves checks that a watch whose request on a
// connection of its own gets no answer (a dead connection reused) is
// abandoned within the quiet bound and opened on the shared connection,
// as a move, not as a failure.
func TestUnansweredOwnWatchMoves(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var requests []string
	shared := make(chan *watch.FakeWatcher, 1)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			own := ctx.Value(ownConnKey{}) != nil
			mu.Lock()
			requests = append(requests, fmt.Sprintf("rv=%q own=%v", opts.ResourceVersion, own))
			mu.Unlock()
			if own {
				<-ctx.Done() // no answer, ever
				return nil, ctx.Err()
			}
			w := watch.NewFakeWithChanSize(1, false)
			shared <- w
			return w, nil
		},
	}
	store := &recorder{}
	var errs []error
	var moves []bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: noWatchList{lw}, Store: store, Logger: logr.Discard(), OwnConnection: 200 * time.Millisecond,
			OnError: func(err error) { errs = append(errs, err) }, OnMove: func(own bool) { moves = append(moves, own) }})
	}()
	var w *watch.FakeWatcher
	select {
	case w = <-shared:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch on the shared connection")
	}
	w.Modify(cm("a", "6"))
	waitFor(t, "the shared watch's event", func() bool { return len(store.all()) == 2 })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`rv="5" own=true`, `rv="5" own=false`}; !slices.Equal(requests, want) {
		t.Errorf("watch requests %v, want %v", requests, want)
	}
	if len(errs) > 0 || !slices.Equal(moves, []bool{false}) {
		t.Errorf("errors %v and moves %v; want none, and one move to the shared connection", errs, moves)
	}
}

// TestRelistSpreadOnOwnConnection checks that the wait that spreads a
// fleet's relists after an outage is not taken for the silence of a
// connection: a streamed relist due on a connection of its own waits,
// then sends its request there, once. (The wait had counted against the
// own watch's quiet bound, which canceled it: the relist went to the
// shared connection at once, and a fleet relisted together.)
func TestRelistSpreadOnOwnConnection(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var requests []string
	watches := make(chan *watch.FakeWatcher, 2)
	fake := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}}, nil // the probe
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			mu.Lock()
			requests = append(requests, fmt.Sprintf("rv=%q initial=%v own=%v", opts.ResourceVersion, opts.SendInitialEvents != nil, ctx.Value(ownConnKey{}) != nil))
			mu.Unlock()
			w := watch.NewFakeWithChanSize(2, false)
			watches <- w
			return w, nil
		},
	}
	var moves []bool
	cfg := &Config{Name: "configmaps", Logger: logr.Discard(), OnMove: func(own bool) { moves = append(moves, own) }}
	// An outage in which the server refused connections is ending.
	lw := &tracking{ListerWatcher: fake, cfg: cfg, log: logr.Discard(), started: true, refused: true}
	// Checks every 10 ms: the spread's wait, up to RelistSpread, outlasts
	// them unless it is under 10 ms (one run in 200).
	r := newReflector("configmaps", lw, &recorder{}, logr.Discard(), Backoff, 20*time.Millisecond)
	r.onMove, r.lastRV = cfg.OnMove, "11"
	go func() {
		w := <-watches
		w.Add(cm("a", "12"))
		w.Action(watch.Bookmark, bookmark("20", true))
	}()
	start := time.Now()
	w, err := r.watchList(context.Background())
	if err != nil || w == nil {
		t.Fatalf("watchList: %v, %v; want a watch", w, err)
	}
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`rv="11" initial=true own=true`}; !slices.Equal(requests, want) || len(moves) > 0 {
		t.Errorf("after %s: watch requests %v and moves %v; want %v, and no move", time.Since(start).Round(time.Millisecond), requests, moves, want)
	}
}
