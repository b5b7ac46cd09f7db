package integration_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// delayResponses returns cfg with the answers to the requests that match
// held back for d: the server has done the work, and its watch events reach
// the manager before the answer does.
func delayResponses(cfg *rest.Config, d time.Duration, match func(*http.Request) bool) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if match(r) {
				time.Sleep(d) // the slow network being simulated
			}
			return resp, err
		})
	})
	return cfg
}

// slowWatches makes the watches that match read their stream late: each
// read of the body waits d first, so events reach the cache d after the
// server sent them while other requests answer at once.
func slowWatches(cfg *rest.Config, d time.Duration, match func(*http.Request) bool) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.URL.Query().Get("watch") == "true" && match(r) {
				resp.Body = slowBody{resp.Body, d}
			}
			return resp, err
		})
	})
	return cfg
}

type slowBody struct {
	io.ReadCloser
	d time.Duration
}

func (b slowBody) Read(p []byte) (int, error) {
	time.Sleep(b.d) // the slow network being simulated
	return b.ReadCloser.Read(p)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// partition sits in a manager's transport (rest.Config.Wrap) and can cut
// the manager off the API server while everyone else still reaches it.
// While cut, open watches end as if the connection closed, and new requests
// fail as a refused connection. That is how client-go's reflector sees an
// unreachable server: it keeps retrying its watch from the resourceVersion
// it last saw, rather than relisting, until the server answers again.
//
// It also records what the manager asked once the partition healed, and
// which watches the server answered with 410 Gone.
type partition struct {
	cut atomic.Bool

	mu       sync.Mutex
	open     map[*watchBody]bool
	healed   bool
	requests []string // after the partition healed
	expired  []string // watches answered with 410 Gone
}

func (p *partition) setCut(cut bool) {
	p.cut.Store(cut)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !cut {
		p.healed = true
		return
	}
	for b := range p.open {
		b.sever()
	}
}

// log returns the watches answered 410 Gone and the requests made since the
// partition healed.
func (p *partition) log() (expired, requests []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.expired), slices.Clone(p.requests)
}

func (p *partition) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if p.cut.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		q := r.URL.Query()
		desc := r.Method + " " + r.URL.Path
		for _, k := range []string{"watch", "sendInitialEvents", "resourceVersion", "resourceVersionMatch"} {
			if v := q.Get(k); v != "" {
				desc += " " + k + "=" + v
			}
		}
		p.mu.Lock()
		if p.healed {
			p.requests = append(p.requests, desc)
		}
		p.mu.Unlock()
		resp, err := rt.RoundTrip(r)
		if err != nil || q.Get("watch") != "true" {
			return resp, err
		}
		if resp.StatusCode == http.StatusGone {
			p.gone(desc)
		}
		b := &watchBody{ReadCloser: resp.Body, p: p, desc: desc}
		p.mu.Lock()
		if p.open == nil {
			p.open = map[*watchBody]bool{}
		}
		p.open[b] = true
		p.mu.Unlock()
		if p.cut.Load() {
			b.sever()
		}
		resp.Body = b
		return resp, nil
	})
}

func (p *partition) gone(desc string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expired = append(p.expired, desc)
}

// watchBody is the body of a watch: it ends cleanly when severed, and
// notices a 410 Gone sent as an event in the stream, which is how the API
// server reports a watch from a compacted resourceVersion.
type watchBody struct {
	io.ReadCloser
	p       *partition
	desc    string
	severed atomic.Bool
	tail    []byte // the end of the stream so far, to find a message split between reads
	seen    bool
}

// tooOld is in the message of every 410 Gone the API server sends a watch:
// etcd's "The resourceVersion for the provided watch is too old." and the
// watch cache's "too old resource version". It is plain text in JSON and in
// protobuf alike.
var tooOld = []byte("too old")

func (b *watchBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if b.severed.Load() {
		return 0, io.EOF
	}
	if !b.seen {
		b.tail = append(b.tail, buf[:n]...)
		if bytes.Contains(b.tail, tooOld) {
			b.seen = true
			b.p.gone(b.desc)
		}
		b.tail = b.tail[max(0, len(b.tail)-len(tooOld)):]
	}
	return n, err
}

// sever ends the watch: its reader gets io.EOF, as if the server had closed
// the connection.
func (b *watchBody) sever() {
	b.severed.Store(true)
	b.ReadCloser.Close()
}

func (b *watchBody) Close() error {
	b.p.mu.Lock()
	delete(b.p.open, b)
	b.p.mu.Unlock()
	return b.ReadCloser.Close()
}
