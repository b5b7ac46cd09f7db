package watcher

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
)

// A busy watch reads from a connection of its own.
//
// Over the HTTP/2 connection a client shares, every event of a watch
// crosses from the connection's reader goroutine to the watch's through a
// pipe, and every 4 KiB read sends a WINDOW_UPDATE frame back, a write
// system call: per event of a 5 KiB Pod, about half the CPU of a cache
// that decodes only what it keeps (BENCHMARKS.md, "scale"). Over HTTP/1.1
// the watch's goroutine reads the socket itself and writes nothing. But an
// HTTP/1.1 connection cannot be pinged: a watch there that goes silent may
// be idle or dead. So a watch moves to a connection of its own only while
// it is busy, and back to the shared connection, whose pings tell a dead
// connection from an idle one, as soon as it is quiet:
//
//   - A watch on the shared connection that delivers busyEvents events
//     within busyWindow ends and resumes from its last resourceVersion on a
//     connection of its own (Route sends the requests marked by onOwn
//     there).
//   - A watch on its own connection that delivers nothing for half its
//     quiet bound (the manager's ConnectionCheck) ends and resumes on the
//     shared connection. A connection that died silently is one that went
//     quiet: it is left within the bound, and the watch resumes where it
//     was, on the connection whose health is checked.
//
// A watch that moves resumes from where it was: nothing is listed again,
// nothing is lost, no event is seen twice.
const (
	busyEvents = 128
	busyWindow = time.Second
)

type ownConnKey struct{}

// onOwn marks ctx for a request on a connection of its own, made for o
// (nil in tests of Route alone).
func onOwn(ctx context.Context, o *ownWatch) context.Context {
	return context.WithValue(ctx, ownConnKey{}, ownMark{o})
}

type ownMark struct{ o *ownWatch }

// holdClock stops the quiet clock of the watch whose request ctx is, if it
// is on a connection of its own, until the returned function is called:
// for a wait of the caller's own before it sends the request (the spread of
// a fleet's relists), which is no silence of the connection's.
func holdClock(ctx context.Context) (resume func()) {
	m, _ := ctx.Value(ownConnKey{}).(ownMark)
	if m.o == nil {
		return func() {}
	}
	m.o.hold()
	return m.o.resume
}

// Route returns a transport that sends the watches this package marks as
// busy over own and everything else over shared. quiet is how long a watch
// on own may go without an event (QuietBound finds it for Config's
// OwnConnection). own must not share its connections with shared: an
// HTTP/1.1 transport beside the HTTP/2 one.
func Route(shared, own http.RoundTripper, quiet time.Duration) http.RoundTripper {
	return route{shared: shared, own: own, quiet: quiet}
}

type route struct {
	shared, own http.RoundTripper
	quiet       time.Duration
}

func (r route) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Value(ownConnKey{}) != nil {
		return r.own.RoundTrip(req)
	}
	return r.shared.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's helpers find the shared transport.
func (r route) WrappedRoundTripper() http.RoundTripper { return r.shared }

// CloseIdleConnections closes the idle connections of both transports.
func (r route) CloseIdleConnections() {
	utilnet.CloseIdleConnectionsFor(r.shared)
	utilnet.CloseIdleConnectionsFor(r.own)
}

// QuietBound returns the quiet bound of the Route in rt's chain of
// wrappers, or 0 if there is none: its watches stay on one connection.
func QuietBound(rt http.RoundTripper) time.Duration {
	for rt != nil {
		switch t := rt.(type) {
		case route:
			return t.quiet
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return 0
		}
	}
	return 0
}

// ownWatch is a watch on a connection of its own: if no event arrives
// between two of its checks, half the quiet bound apart, it stops, and
// quiet reports it. Its clock starts with the request, so a connection
// that died before the server answered (an idle one reused) is left as
// quickly as one that died while the events flowed; it stops while the
// caller waits on purpose before sending the request (holdClock).
type ownWatch struct {
	cancel context.CancelFunc // the request's context
	every  time.Duration      // between checks

	seen atomic.Int64 // events read
	mu   sync.Mutex
	w    events // set once the server answered
	t    *time.Timer
	last int64 // seen at the last check
	done bool  // stopped
	held bool  // the clock is held
	quit bool  // stopped by a check
}

// newOwnWatch starts the clock of a watch on a connection of its own, and
// returns the context for its request, marked for Route.
func newOwnWatch(ctx context.Context, quiet time.Duration) (*ownWatch, context.Context) {
	o := &ownWatch{every: max(quiet/2, time.Millisecond)}
	ctx, o.cancel = context.WithCancel(onOwn(ctx, o))
	o.mu.Lock()
	o.t = time.AfterFunc(o.every, o.check)
	o.mu.Unlock()
	return o, ctx
}

// hold stops o's clock (a check already under way does nothing); resume
// starts it again, a full check away.
func (o *ownWatch) hold() {
	o.mu.Lock()
	o.held = true
	o.t.Stop()
	o.mu.Unlock()
}

func (o *ownWatch) resume() {
	o.mu.Lock()
	o.held = false
	if !o.done {
		o.last = o.seen.Load()
		o.t.Reset(o.every)
	}
	o.mu.Unlock()
}

// attach gives o the watch its request opened. It returns false, and
// stops w, if o was stopped meanwhile.
func (o *ownWatch) attach(w events) bool {
	o.mu.Lock()
	if o.done {
		o.mu.Unlock()
		w.Stop()
		return false
	}
	o.w = w
	o.mu.Unlock()
	return true
}

// Next returns the next event of the attached watch.
func (o *ownWatch) Next() (ev watch.Event, err error) {
	ev, err = o.w.Next()
	if err == nil {
		o.seen.Add(1)
		return ev, nil
	}
	o.mu.Lock()
	stopped := o.done
	o.mu.Unlock()
	if stopped {
		return ev, io.EOF // its request was canceled because it was stopped
	}
	return ev, err
}

func (o *ownWatch) check() {
	o.mu.Lock()
	if o.done || o.held {
		o.mu.Unlock()
		return
	}
	if n := o.seen.Load(); n != o.last {
		o.last = n
		o.t.Reset(o.every)
		o.mu.Unlock()
		return
	}
	o.quit = true
	o.mu.Unlock()
	o.Stop()
}

// Stop ends the watch and its request.
func (o *ownWatch) Stop() {
	o.mu.Lock()
	o.done = true
	o.t.Stop()
	w := o.w
	o.mu.Unlock()
	// The request's context first: the body's reader then sees a request
	// this side ended, not a failure to report.
	o.cancel()
	if w != nil {
		w.Stop()
	}
}

// quiet reports whether the watch was stopped for going quiet.
func (o *ownWatch) quiet() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.quit
}
