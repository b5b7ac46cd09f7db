package transport

import (
	"context"
	"net"
	"sync"
)

// Conns are the open connections of a transport of the caller's own.
// Closing idle connections is not enough when a member leaves or the
// manager stops: a connection whose last watch ends an instant later is
// not idle yet, and would stay open, with its reader goroutine. A closed
// set still dials: a client used later gets a new connection. It is safe
// for concurrent use.
type Conns struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

func (s *Conns) dial(d func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
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

// CloseAll closes every open connection. It does nothing on a nil *Conns.
func (s *Conns) CloseAll() {
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
	set  *Conns
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
