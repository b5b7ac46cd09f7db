package blackhole_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/blackhole"
)

// echoServer echoes every connection back and records what it received.
type echoServer struct {
	ln       net.Listener
	mu       sync.Mutex
	received bytes.Buffer
	wg       sync.WaitGroup
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.received.Write(buf[:n])
						s.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received.String()
}

// roundTrip writes msg on c and reads it back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read back %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("got %q back, want %q", buf, msg)
	}
}

func TestBlackhole(t *testing.T) {
	echo := startEcho(t)
	p, err := blackhole.Start(echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	roundTrip(t, old, "before")

	if n := p.Blackhole(); n != 1 {
		t.Fatalf("Blackhole() = %d, want 1 connection", n)
	}

	// The open connection takes writes, far more than the socket buffers
	// hold, so the proxy must be reading them...
	big := make([]byte, 32<<20)
	_ = old.SetWriteDeadline(time.Now().Add(20 * time.Second))
	if _, err := old.Write(big); err != nil {
		t.Fatalf("writing 32 MiB to the blackholed connection: %v", err)
	}
	// ...and gives nothing back, without closing.
	_ = old.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := old.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on the blackholed connection: got %d bytes, %v; want a timeout", n, err)
	}

	// A new connection works.
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	roundTrip(t, fresh, "after")

	// Nothing the old connection sent after the blackhole reached the server.
	if got, want := echo.got(), "beforeafter"; got != want {
		t.Errorf("the server received %q, want %q", got, want)
	}
	if got := len(p.Accepted()); got != 2 {
		t.Errorf("got %d accepted connections, want 2", got)
	}

	// Close ends the blackholed connection too.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Errorf("read on the blackholed connection after Close: got %v, want end of file or reset", err)
	}
}

// A connection the server closes is closed for the client too, as long as
// it is not blackholed.
func TestServerClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("bye"))
			c.Close()
		}
	}()
	p, err := blackhole.Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("got %q, %v; want \"bye\" and end of file", got, err)
	}
}

func TestMute(t *testing.T) {
	echo := startEcho(t)
	p, err := blackhole.Start(echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, "before")

	p.Mute()
	if _, err := c.Write([]byte("muted")); err != nil {
		t.Fatal(err)
	}
	// Nothing reaches the server, so nothing comes back.
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read while muted: got %d bytes, %v; want a timeout", n, err)
	}
	if got, want := echo.got(), "before"; got != want {
		t.Errorf("the server received %q while muted, want %q", got, want)
	}

	// Unmuted, writes pass again. (That the server's bytes pass while
	// muted is TestMuteServerSpeaks: an echo server has nothing to say.)
	p.Unmute()
	roundTrip(t, c, "after")
	if got, want := echo.got(), "beforeafter"; got != want {
		t.Errorf("the server received %q, want %q", got, want)
	}
}

// While muted, a server that speaks first still reaches the client.
func TestMuteServerSpeaks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := blackhole.Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Mute()
	received := make(chan string, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		s.Write([]byte("event"))
		_ = s.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 16)
		n, _ := s.Read(buf)
		received <- string(buf[:n])
	}()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "event" {
		t.Fatalf("got %q, %v; want \"event\" from the server", buf, err)
	}
	if got := <-received; got != "" {
		t.Errorf("the server received %q while muted, want nothing", got)
	}
}
