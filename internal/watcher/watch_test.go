package watcher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// recorder is a store that writes down what it is told, in order.
type recorder struct {
	mu  sync.Mutex
	ops []string
}

func (r *recorder) add(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, fmt.Sprintf(format, args...))
	return nil
}

func (r *recorder) name(obj any) string {
	m := obj.(metav1.Object)
	return m.GetName() + "@" + m.GetResourceVersion()
}

func (r *recorder) Add(obj any) error    { return r.add("add %s", r.name(obj)) }
func (r *recorder) Update(obj any) error { return r.add("update %s", r.name(obj)) }
func (r *recorder) Delete(obj any) error { return r.add("delete %s", r.name(obj)) }
func (r *recorder) Replace(list []any, rv string) error {
	var names []string
	for _, obj := range list {
		names = append(names, r.name(obj))
	}
	slices.Sort(names)
	return r.add("replace [%s] at %s", strings.Join(names, " "), rv)
}
func (r *recorder) Resync() error            { return nil }
func (r *recorder) Bookmark(rv string) error { return r.add("bookmark %s", rv) }

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func cm(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func bookmark(rv string, end bool) *corev1.ConfigMap {
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	if end {
		b.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return b
}

// opened is a watch request and how the test answers it.
type opened struct {
	opts   metav1.ListOptions
	answer chan<- answer
}

type answer struct {
	w   *watch.FakeWatcher
	err error
}

// TestReflectorStreamsListAndResumes drives the reflector through a
// streamed initial list, changes, a bookmark, a watch that ends and is
// resumed from its last resourceVersion, a 410 on the watch, a 410 on the
// streamed relist at that resourceVersion, and a consistent relist after
// it: every request's options and every change the store sees, in order.
func TestReflectorStreamsListAndResumes(t *testing.T) {
	defer goleak.VerifyNone(t)
	requests := make(chan opened)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			t.Error("listed: the streamed list should serve")
			return &corev1.ConfigMapList{}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			ch := make(chan answer, 1)
			select {
			case requests <- opened{opts, ch}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			a := <-ch
			if a.err != nil {
				return nil, a.err
			}
			return a.w, nil
		},
	}
	store := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: lw, Store: store, Logger: logr.Discard()})
	}()
	defer func() {
		cancel()
		<-done
	}()

	next := func(want string) (metav1.ListOptions, chan<- answer) {
		t.Helper()
		select {
		case o := <-requests:
			got := fmt.Sprintf("rv=%q initial=%v match=%q bookmarks=%v", o.opts.ResourceVersion,
				o.opts.SendInitialEvents != nil && *o.opts.SendInitialEvents, o.opts.ResourceVersionMatch, o.opts.AllowWatchBookmarks)
			if got != want {
				t.Errorf("watch request: %s, want %s", got, want)
			}
			return o.opts, o.answer
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch request; want %s", want)
		}
		return metav1.ListOptions{}, nil
	}
	waitOps := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d store operations", n), func() bool { return len(store.all()) >= n })
	}

	// The streamed initial list, then changes on the same stream.
	_, reply := next(`rv="" initial=true match="NotOlderThan" bookmarks=true`)
	w := watch.NewFakeWithChanSize(10, false)
	reply <- answer{w: w}
	w.Add(cm("a", "10"))
	w.Add(cm("b", "11"))
	w.Action(watch.Bookmark, bookmark("12", true))
	w.Modify(cm("a", "13"))
	w.Action(watch.Bookmark, bookmark("14", false))
	w.Delete(cm("b", "15"))
	waitOps(4)
	w.Stop() // the server ends the watch: resumed where it ended

	_, reply = next(`rv="15" initial=false match="" bookmarks=true`)
	w = watch.NewFakeWithChanSize(10, false)
	reply <- answer{w: w}
	w.Modify(cm("a", "16"))
	waitOps(5)
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"})

	// The relist streams from the last resourceVersion seen; that is gone
	// too, so it streams a consistent snapshot.
	_, reply = next(`rv="16" initial=true match="NotOlderThan" bookmarks=true`)
	reply <- answer{err: apierrors.NewResourceExpired("too old resource version: 16 (30)")}
	_, reply = next(`rv="" initial=true match="NotOlderThan" bookmarks=true`)
	w = watch.NewFakeWithChanSize(10, false)
	reply <- answer{w: w}
	w.Add(cm("a", "30"))
	w.Add(cm("c", "31"))
	w.Delete(cm("c", "32")) // a change while the list streams: the list holds what is left
	w.Action(watch.Bookmark, bookmark("33", true))
	waitOps(6)

	want := []string{
		"replace [a@10 b@11] at 12",
		"update a@13",
		"bookmark 14",
		"delete b@15",
		"update a@16",
		"replace [a@30] at 33",
	}
	if got := store.all(); !slices.Equal(got, want) {
		t.Errorf("store saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReflectorFallsBackToList checks a server that cannot stream lists:
// the reflector lists, then watches from the list's resourceVersion.
func TestReflectorFallsBackToList(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var watches []string
	store := &recorder{}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.ConfigMap{*cm("a", "5")}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			watches = append(watches, fmt.Sprintf("rv=%q initial=%v", opts.ResourceVersion, opts.SendInitialEvents != nil))
			if opts.SendInitialEvents != nil {
				return nil, apierrors.NewBadRequest("sendInitialEvents is not supported")
			}
			w := watch.NewFakeWithChanSize(10, false)
			w.Modify(cm("a", "8"))
			return w, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: lw, Store: store, Logger: logr.Discard()})
	}()
	waitFor(t, "the watch's event", func() bool { return len(store.all()) >= 2 })
	cancel()
	<-done
	if want := []string{"replace [a@5] at 7", "update a@8"}; !slices.Equal(store.all(), want) {
		t.Errorf("store saw %v, want %v", store.all(), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`rv="" initial=true`, `rv="7" initial=false`}; len(watches) < 2 || !slices.Equal(watches[:2], want) {
		t.Errorf("watches %v, want %v first", watches, want)
	}
}

// TestReflectorServerRefusesStreaming checks a server whose WatchList
// feature is off, which answers a streamed list with 422 Invalid naming
// sendInitialEvents: the reflector says so in one log line, lists in
// pages, reports that mode after each list, and never asks to stream
// again, not after a 410 either; the refusal is an answer, not an outage
// nor an error of the watch.
func TestReflectorServerRefusesStreaming(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var requests []string
	var first *watch.FakeWatcher
	store := &recorder{}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			requests = append(requests, fmt.Sprintf("list rv=%q", opts.ResourceVersion))
			rv := fmt.Sprint(7 + len(requests))
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: []corev1.ConfigMap{*cm("a", "5")}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			requests = append(requests, fmt.Sprintf("watch rv=%q initial=%v", opts.ResourceVersion, opts.SendInitialEvents != nil))
			if opts.SendInitialEvents != nil { // as kube-apiserver's ValidateListOptions answers
				return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", field.ErrorList{
					field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")})
			}
			w := watch.NewFakeWithChanSize(10, false)
			if first == nil {
				first = w
				w.Error(&apierrors.NewGone("too old resource version").ErrStatus) // the watch cannot resume: relist
			} else {
				w.Modify(cm("a", "9"))
			}
			return w, nil
		},
	}
	var log lines
	var modes []bool
	var errs []error
	var connected []bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: lw, Store: store, Logger: log.logger(),
			OnListMode:  func(streaming bool) { mu.Lock(); modes = append(modes, streaming); mu.Unlock() },
			OnError:     func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
			OnConnected: func(ok bool, _ time.Duration) { mu.Lock(); connected = append(connected, ok); mu.Unlock() },
		})
	}()
	waitFor(t, "the second watch's event", func() bool { return slices.Contains(store.all(), "update a@9") })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []string{`watch rv="" initial=true`, `list rv="0"`, `watch rv="9" initial=false`, `list rv="9"`, `watch rv="11" initial=false`}
	if len(requests) < len(want) || !slices.Equal(requests[:len(want)], want) {
		t.Errorf("requests %q, want %q first", requests, want)
	}
	if !slices.Equal(modes, []bool{false, false}) {
		t.Errorf("list modes %v, want [false false]: paged, after each of the two lists", modes)
	}
	if len(errs) > 0 {
		t.Errorf("OnError got %v, want nothing: a refused stream is an answer", errs)
	}
	if !slices.Equal(connected, []bool{true}) {
		t.Errorf("OnConnected got %v, want [true]: no outage", connected)
	}
	if n := log.count("the API server does not stream lists; listing in pages"); n != 1 {
		t.Errorf("%d log lines say the server does not stream lists, want 1:\n%s", n, strings.Join(log.all, "\n"))
	}
}
