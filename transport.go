package ctrl

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/watcher"
)

// The manager's connections to an API server, its own cluster's or a
// member's: one HTTP client per cluster, shared by every request of the
// manager there, over a transport of its own.

// restClients returns the manager's copy of cfg with ctrl's defaults, the
// HTTP client every request of the manager to that cluster shares, and,
// when the transport is the manager's alone, its connections.
func restClients(cfg *rest.Config, check time.Duration, compression bool) (*rest.Config, *http.Client, *connSet, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = cfg.DisableCompression || !compression
	if check == 0 {
		check = 3 * time.Second
	}
	var conns *connSet
	if check > 0 && cfg.Transport == nil && cfg.Dial == nil {
		// A transport of the manager's own: client-go shares one per TLS
		// configuration in the process, and the ping settings below would
		// reach every client of the program. A dialer opts out of sharing.
		conns = &connSet{}
		cfg.Dial = conns.dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	}
	switch {
	case cfg.RateLimiter != nil:
	case cfg.QPS > 0:
		if cfg.Burst <= 0 {
			cfg.Burst = int(cfg.QPS * 1.5)
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	default:
		cfg.QPS = -1 // client-go: no limit (zero would be its default of 5)
	}
	// The watches' transport reports a stream that dies with an error to
	// its cache (see internal/watcher).
	cfg.Wrap(watcher.WrapTransport)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return fence{rt} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if t := httpTransport(hc.Transport); t != nil && check > 0 {
		// client-go's HTTP/2 transport reads these when it opens a
		// connection, over its own settings.
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: check, PingTimeout: check}
	}
	if conns != nil && rest.IsConfigTransportTLS(*cfg) && len(cfg.NextProtos) == 0 {
		// Busy watches read from HTTP/1.1 connections of their own, which
		// they leave when quiet for check (see internal/watcher, conn.go).
		own := rest.CopyConfig(cfg)
		own.NextProtos = []string{"http/1.1"}
		oc, err := rest.HTTPClientFor(own)
		if err != nil {
			return nil, nil, nil, err
		}
		hc.Transport = watcher.Route(hc.Transport, oc.Transport, check)
	}
	return cfg, hc, conns, nil
}

// httpOf returns the HTTP client of cluster's requests; nil for fakes and
// for a member that left.
func (m *Manager) httpOf(cluster string) *http.Client {
	if cluster == "" {
		return m.clients.HTTP
	}
	if mb := m.memberOf(cluster); mb != nil {
		return mb.clients.HTTP
	}
	return nil
}

// fence refuses a write whose context carries a leadership that has ended,
// as the request leaves for the server, and again each time the transport
// reads the request's body. Client.write checks first, but a request may
// leave long after that check: after the rate limiter's wait, a retry
// after a 429, a new connection's handshake, or a pause of the process.
// The body is read after the request's headers went out and before its
// end does, so a request whose leadership ended meanwhile is cut short,
// and the server, which reads the whole body before it acts, drops it.
// What remains is the time from the body's last read to the socket,
// microseconds, and bodiless writes, fenced as they leave only.
type fence struct{ rt http.RoundTripper }

func (f fence) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead || !leader.Holds(req.Context()) {
		return f.rt.RoundTrip(req)
	}
	ctx := req.Context()
	if err := leader.Check(ctx); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // as a RoundTripper must, even on error
		}
		return nil, err
	}
	if req.Body == nil || req.Body == http.NoBody {
		return f.rt.RoundTrip(req)
	}
	fenced := *req // a RoundTripper must not change the caller's request
	fenced.Body = fencedBody{ctx, req.Body}
	if get := req.GetBody; get != nil {
		fenced.GetBody = func() (io.ReadCloser, error) {
			b, err := get()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return fencedBody{ctx, b}, nil
		}
	}
	return f.rt.RoundTrip(&fenced)
}

// fencedBody is a write's body that cannot be read once the leadership in
// ctx has ended: the transport then abandons the request.
type fencedBody struct {
	ctx context.Context
	io.ReadCloser
}

func (b fencedBody) Read(p []byte) (int, error) {
	if err := leader.Check(b.ctx); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

func (f fence) WrappedRoundTripper() http.RoundTripper { return f.rt }

// httpTransport finds the *http.Transport under client-go's wrappers.
func httpTransport(rt http.RoundTripper) *http.Transport {
	for rt != nil {
		switch t := rt.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
	return nil
}

// connSet is the open connections of a transport of the manager's own.
// Closing idle connections is not enough when a member leaves or the
// manager stops: a connection whose last stream (a watch) ends an instant
// later is not idle yet, and would stay open, with its reader goroutine,
// for the life of the process. A closed set still dials: a client used
// later gets a new connection.
type connSet struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

func (s *connSet) dial(d func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: s}
		s.mu.Lock()
		if s.open == nil {
			s.open = map[*trackedConn]struct{}{}
		}
		s.open[tc] = struct{}{}
		s.mu.Unlock()
		return tc, nil
	}
}

// closeAll closes every open connection.
func (s *connSet) closeAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.open, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// programName is the default field manager: the program's base name, as
// client-go's default user agent has it, cut to the 128 characters a field
// manager may have.
func programName() string {
	name := ""
	if len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	name = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, name)
	if name == "" || name == "." || name == string(filepath.Separator) {
		return "ctrl"
	}
	if len(name) > 128 {
		name = name[:128]
	}
	return name
}
