// Package blackhole is a loopback TCP proxy that can make every open
// connection go silently dead, the way a connection does when a NAT entry,
// a load balancer or a network path drops it without a reset: the client's
// socket stays open and its writes are accepted, but nothing ever comes
// back. Only a client's own liveness check (HTTP/2 pings, request timeouts)
// can tell. New connections pass normally, so a client that redials gets
// through.
//
// It can also mute the clients: what they send stops reaching the server
// while what the server sends still reaches them, so a client keeps reading
// a stream (a watch) while none of its requests lands.
//
// The proxy forwards bytes and does not look at them: TLS passes through, so
// a client that points at the proxy still verifies the server's certificate,
// as long as the certificate covers the proxy's address (127.0.0.1).
package blackhole

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the TCP connections it accepts to a target address. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	muted  atomic.Bool

	mu       sync.Mutex
	conns    map[*conn]struct{}
	accepted []time.Time
	closed   bool
	wg       sync.WaitGroup
}

// conn is one client connection and its upstream connection.
type conn struct {
	client, upstream net.Conn
	dead             atomic.Bool // blackholed: forward nothing either way
}

// Start listens on 127.0.0.1 on a free port and forwards every connection
// to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the address the proxy listens on, as host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		at := time.Now()
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &conn{client: client, upstream: upstream}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			upstream.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.accepted = append(p.accepted, at)
		p.mu.Unlock()
		p.wg.Go(func() { p.toUpstream(c) })
		p.wg.Go(func() { p.toClient(c) })
	}
}

// toUpstream copies what the client sends to the upstream connection until
// the client closes; while the proxy is muted, or once the connection is
// blackholed, it reads and discards instead, so the client's writes keep
// succeeding.
func (p *Proxy) toUpstream(c *conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 && !c.dead.Load() && !p.muted.Load() {
			if _, werr := c.upstream.Write(buf[:n]); werr != nil && !c.dead.Load() {
				break
			}
		}
		if err != nil {
			break
		}
	}
	// The client closed (or the proxy did): let go of both sides.
	p.drop(c)
}

// toClient copies what the upstream sends to the client until either side
// closes, and stops writing to the client once the connection is
// blackholed, leaving the client's socket open.
func (p *Proxy) toClient(c *conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.upstream.Read(buf)
		if c.dead.Load() {
			return
		}
		if n > 0 {
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if c.dead.Load() {
		return
	}
	// The server closed, or the client is gone: pass the close on.
	p.drop(c)
}

// drop closes both sides of c and forgets it.
func (p *Proxy) drop(c *conn) {
	c.client.Close()
	c.upstream.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Blackhole makes every connection open now go silently dead and returns
// how many it affected. From then on the proxy reads and discards whatever
// their clients send and forwards nothing back; the client sockets stay
// open until their clients close them. Their upstream connections are
// closed, so the server lets go of the requests on them. Bytes that were
// being written to a client at the moment of the call may still arrive;
// nothing read from the server after it does. Connections accepted later
// are forwarded normally.
func (p *Proxy) Blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.dead.Swap(true) {
			continue
		}
		n++
		c.upstream.Close()
	}
	return n
}

// Mute makes the proxy read and discard what clients send, on open and new
// connections alike, until Unmute: nothing they send reaches the server,
// while what the server sends still reaches them. What is discarded is
// lost: a connection that was muted in the middle of a request is of no
// use after Unmute, and should be cut by the server.
func (p *Proxy) Mute() { p.muted.Store(true) }

// Unmute makes the proxy pass what clients send again.
func (p *Proxy) Unmute() { p.muted.Store(false) }

// Accepted returns when each connection was accepted, in order.
func (p *Proxy) Accepted() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.accepted...)
}

// Close stops accepting, closes every connection, blackholed or not, and
// waits for the proxy's goroutines to finish.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.client.Close()
		c.upstream.Close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
