package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func TestBackoffStaysShortAndJittered(t *testing.T) {
	b := Backoff
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := b.Step()
		if d < Backoff.Duration || d > time.Duration(float64(Backoff.Cap)*(1+Backoff.Jitter)) {
			t.Fatalf("step %d: delay %s outside [%s, %s]", i, d, Backoff.Duration, time.Duration(float64(Backoff.Cap)*(1+Backoff.Jitter)))
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays in 200 steps: not jittered", len(seen))
	}
}

// server is a scripted API server for one reflector: its list and watch
// calls fail while it is down.
type server struct {
	mu      sync.Mutex
	down    bool
	lists   int
	rv      int
	watches chan *watch.FakeWatcher
	ctxs    chan context.Context // of each watch request
}

var errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)

func (s *server) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *server) listCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

func (s *server) listerWatcher() cache.ListerWatcher {
	return noWatchList{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.down {
				return nil, errRefused
			}
			s.lists++
			s.rv++
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(s.rv)}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			s.mu.Lock()
			down := s.down
			s.mu.Unlock()
			if down {
				return nil, errRefused
			}
			w := watch.NewFakeWithChanSize(10, false)
			if s.ctxs != nil {
				s.ctxs <- ctx
			}
			s.watches <- w
			return w, nil
		},
	}}
}

// noWatchList makes the reflector list and then watch, as it does against
// servers without streaming lists.
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// lines is a logger that keeps what it logs.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.all = append(l.all, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

func (l *lines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.all {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunRecoversAndLogsEachOutageOnce drives one reflector through a
// server that is down at start, a watch that ends in 410 Gone, and an
// outage after it worked: every outage is one line when it starts and one
// when it ends, a 410 relists at once without counting as an outage, and
// Run returns when its context ends.
func TestRunRecoversAndLogsEachOutageOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	saved := Backoff
	Backoff.Duration, Backoff.Cap = time.Millisecond, 5*time.Millisecond
	defer func() { Backoff = saved }()

	srv := &server{down: true, watches: make(chan *watch.FakeWatcher, 100)}
	var log lines
	var mu sync.Mutex
	var events []string // from OnConnected
	var errs int
	onConnected := func(connected bool, blind time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf("%v blind>0=%v", connected, blind > 0))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{
			Name:        "*v1.ConfigMap",
			Type:        &corev1.ConfigMap{},
			ListerWatch: srv.listerWatcher(),
			Store:       cache.NewStore(cache.MetaNamespaceKeyFunc),
			Logger:      log.logger(),
			OnError: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				var short *cache.VeryShortWatchError
				if !errors.Is(err, syscall.ECONNREFUSED) && !errors.As(err, &short) {
					t.Errorf("OnError(%v): want the server's error, or the stream's end", err)
				}
				errs++
			},
			OnConnected: onConnected,
		})
	}()
	defer func() {
		cancel()
		<-done
	}()

	// Down at start: failures back off and are logged once.
	waitFor(t, "a few failed attempts", func() bool { mu.Lock(); defer mu.Unlock(); return errs >= 5 })
	srv.setDown(false)
	w := <-srv.watches
	waitFor(t, "the watch to be back", func() bool { return log.count("watch is back") == 1 })
	if got := log.count("cannot list or watch; retrying"); got != 1 {
		t.Errorf("%d lines about the server being unreachable at start, want 1:\n%s", got, strings.Join(log.all, "\n"))
	}

	// 410 Gone: the watch ends cleanly, the reflector relists and watches.
	lists := srv.listCount()
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	w = <-srv.watches
	if got := srv.listCount(); got != lists+1 {
		t.Errorf("%d lists after a 410, want %d: one relist", got, lists+1)
	}

	// An outage after the watch worked: the stream ends, calls fail.
	srv.setDown(true)
	mu.Lock()
	before := errs
	mu.Unlock()
	w.Stop()
	waitFor(t, "failed attempts during the outage", func() bool { mu.Lock(); defer mu.Unlock(); return errs >= before+5 })
	srv.setDown(false)
	<-srv.watches
	waitFor(t, "the watch to be back", func() bool { return log.count("watch is back") == 2 })

	if got := log.count("lost the watch; retrying"); got != 1 {
		t.Errorf("%d lines about losing the watch, want 1:\n%s", got, strings.Join(log.all, "\n"))
	}
	mu.Lock()
	got := strings.Join(events, ", ")
	mu.Unlock()
	if want := "false blind>0=false, true blind>0=true, false blind>0=false, true blind>0=true"; got != want {
		t.Errorf("OnConnected calls: %s\nwant: %s", got, want)
	}
}

// TestDeadStream checks a watch whose stream dies with an error while the
// server still answers new requests, as when a ping finds its connection
// dead: reading its body fails (see WrapTransport), the outage is logged
// once, and its blindness counts from the last event the store received,
// not from when the death was noticed.
func TestDeadStream(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := &server{watches: make(chan *watch.FakeWatcher, 100), ctxs: make(chan context.Context, 100)}
	var log lines
	var mu sync.Mutex
	var blinds []time.Duration
	var streamErrs int
	lastEvent := time.Now().Add(-3 * time.Second) // the store last heard from the server 3 s ago
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{
			Name:        "*v1.ConfigMap",
			Type:        &corev1.ConfigMap{},
			ListerWatch: srv.listerWatcher(),
			Store:       cache.NewStore(cache.MetaNamespaceKeyFunc),
			Logger:      log.logger(),
			LastEvent:   func() time.Time { return lastEvent },
			OnError: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(err.Error(), "client connection lost") {
					streamErrs++
				}
			},
			OnConnected: func(connected bool, blind time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if connected {
					blinds = append(blinds, blind)
				}
			},
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	w, wctx := <-srv.watches, <-srv.ctxs
	// What the transport does when the stream's body fails, and then what
	// client-go's StreamWatcher does.
	body := &streamBody{ReadCloser: io.NopCloser(failingReader{errLost}), ctx: wctx, report: wctx.Value(reporterKey{}).(func(error))}
	if _, err := body.Read(make([]byte, 1)); !errors.Is(err, errLost) {
		t.Fatalf("read: got %v, want %v", err, errLost)
	}
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError,
		Message: "unable to decode an event from the watch stream: " + errLost.Error()})
	<-srv.watches
	waitFor(t, "the watch to be back", func() bool { return log.count("watch is back") == 1 })
	if got := log.count("lost the watch; retrying"); got != 1 {
		t.Errorf("%d lines about losing the watch, want 1:\n%s", got, strings.Join(log.all, "\n"))
	}
	mu.Lock()
	defer mu.Unlock()
	if streamErrs != 1 {
		t.Errorf("OnError saw the stream's error %d times, want 1", streamErrs)
	}
	if len(blinds) != 2 || blinds[1] < 3*time.Second {
		t.Errorf("blind times reported: %v, want the second at least 3s (since the last event)", blinds)
	}
}

// TestForbiddenIsNoOutage runs a reflector whose watches the server
// forbids, after lists it allows, and then one whose lists it forbids
// until it allows them: a refusal is an answer, so no line says the watch
// was lost or is back, and OnConnected reports nothing but the first
// working call; the cycles go on, for the permission may come.
func TestForbiddenIsNoOutage(t *testing.T) {
	defer goleak.VerifyNone(t)
	saved := Forbidden
	Forbidden.Duration, Forbidden.Cap = time.Millisecond, 5*time.Millisecond
	defer func() { Forbidden = saved }()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC rule"))

	for _, verb := range []string{"watch", "list"} {
		t.Run(verb, func(t *testing.T) {
			var mu sync.Mutex
			lists, watches, refusals := 0, 0, 0
			allowed := false
			var connected []bool
			lw := noWatchList{&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
					mu.Lock()
					defer mu.Unlock()
					if verb == "list" && !allowed {
						refusals++
						return nil, forbidden
					}
					lists++
					return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
				},
				WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
					mu.Lock()
					defer mu.Unlock()
					if verb == "watch" && !allowed {
						refusals++
						return nil, forbidden
					}
					watches++
					return watch.NewFakeWithChanSize(10, false), nil
				},
			}}
			var log lines
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				Run(ctx, Config{Name: "*v1.ConfigMap", Type: &corev1.ConfigMap{}, ListerWatch: lw,
					Store: cache.NewStore(cache.MetaNamespaceKeyFunc), Logger: log.logger(),
					OnConnected: func(ok bool, _ time.Duration) { mu.Lock(); connected = append(connected, ok); mu.Unlock() }})
			}()
			waitFor(t, "five refusals", func() bool { mu.Lock(); defer mu.Unlock(); return refusals >= 5 })
			mu.Lock()
			allowed = true
			mu.Unlock()
			waitFor(t, "a watch", func() bool { mu.Lock(); defer mu.Unlock(); return watches > 0 })
			cancel()
			<-done
			for _, s := range []string{"lost the watch", "watch is back", "cannot list or watch"} {
				if n := log.count(s); n != 0 {
					t.Errorf("%d lines %q, want none:\n%s", n, s, strings.Join(log.all, "\n"))
				}
			}
			if verb == "watch" && lists < 5 {
				t.Errorf("%d lists, want a relist per refused watch", lists)
			}
			if len(connected) != 1 || !connected[0] {
				t.Errorf("OnConnected calls %v, want [true]", connected)
			}
		})
	}
}

var errLost = errors.New("http2: client connection lost")

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// TestStreamTransport checks which errors of reading a response body the
// transport reports: those of a watch request (its context carries a
// reporter) that are not the end of the stream, once, while the request's
// context is alive.
func TestStreamTransport(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		watch   bool // the request carries a reporter
		cancel  bool // the request's context ended first
		reports int
	}{
		{"connection lost", errLost, true, false, 1},
		{"end of stream", io.EOF, true, false, 0},
		{"unexpected end", io.ErrUnexpectedEOF, true, false, 0},
		{"connection reset", fmt.Errorf("read tcp: %w", syscall.ECONNRESET), true, false, 0},
		{"canceled by the reader", errLost, true, true, 0},
		{"not a watch", errLost, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reports int
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.watch {
				ctx = withStreamReporter(ctx, func(error) { reports++ })
			}
			if tt.cancel {
				cancel()
			}
			rt := WrapTransport(roundTripper(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Body: io.NopCloser(failingReader{tt.err})}, nil
			}))
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:6443/api/v1/configmaps?watch=true", nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				resp.Body.Read(make([]byte, 8))
			}
			if reports != tt.reports {
				t.Errorf("reported %d times, want %d", reports, tt.reports)
			}
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNotServedBacksOff runs a reflector against a resource the server
// does not serve (404, a CRD deleted): its cycles back off past Backoff's
// cap, at NotServed's pace, or Settling's for 404s the caller expects
// (Config.Quiet), which also go unlogged.
func TestNotServedBacksOff(t *testing.T) {
	defer goleak.VerifyNone(t)
	savedB, savedN, savedS := Backoff, NotServed, Settling
	defer func() { Backoff, NotServed, Settling = savedB, savedN, savedS }()
	Backoff.Duration, Backoff.Cap, Backoff.Jitter = time.Millisecond, 2*time.Millisecond, 0
	scaled := wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: time.Second, Steps: math.MaxInt32}
	unused := wait.Backoff{Duration: time.Minute, Steps: math.MaxInt32} // a schedule not to follow

	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			NotServed, Settling = scaled, unused
			if quiet {
				NotServed, Settling = unused, scaled
			}
			notFound := apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
			var mu sync.Mutex
			var calls []time.Time
			lw := noWatchList{&cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					mu.Lock()
					defer mu.Unlock()
					calls = append(calls, time.Now())
					return nil, notFound
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					return nil, notFound
				},
			}}
			var log lines
			cfg := Config{Name: "widgets", Type: &corev1.ConfigMap{}, ListerWatch: lw,
				Store: cache.NewStore(cache.MetaNamespaceKeyFunc), Logger: log.logger()}
			if quiet {
				cfg.Quiet = apierrors.IsNotFound
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				Run(ctx, cfg)
			}()
			waitFor(t, "ten lists", func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) >= 10 })
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			// The ninth pause is the schedule's ninth step, 256 ms: timers
			// only ever fire late, so this is a lower bound.
			if gap := calls[9].Sub(calls[8]); gap < 256*time.Millisecond {
				t.Errorf("gap between the 9th and 10th list: got %s, want at least 256ms", gap)
			}
			want := 1
			if quiet {
				want = 0
			}
			if got := log.count("cannot list or watch; retrying"); got != want {
				t.Errorf("lines about the failures: got %d, want %d:\n%s", got, want, strings.Join(log.all, "\n"))
			}
		})
	}
}
