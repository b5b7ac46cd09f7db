// Package transport makes the manager's connections to an API server, its
// own cluster's or a member's: one HTTP client per cluster, shared by every
// request of the manager there, over a transport of its own whose writes
// are fenced by the leadership in their context.
package transport

import (
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/typedctrl/ctrl/internal/watcher"
)

// New returns a copy of cfg with ctrl's defaults, the HTTP client every
// request to that cluster shares, and, when the transport is the caller's
// alone, its connections (nil otherwise). check is the connection check's
// interval: 0 means 3 s, a negative value none.
func New(cfg *rest.Config, check time.Duration, compression bool) (*rest.Config, *http.Client, *Conns, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = cfg.DisableCompression || !compression
	if check == 0 {
		check = 3 * time.Second
	}
	var conns *Conns
	if check > 0 && cfg.Transport == nil && cfg.Dial == nil {
		// client-go shares a transport per TLS configuration in the
		// process, and the ping settings below would reach every client of
		// the program; a dialer opts out of sharing.
		conns = &Conns{}
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
	cfg.Wrap(watcher.WrapTransport) // reports a watch that dies with an error to its cache
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return fence{rt} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if t := httpTransport(hc.Transport); t != nil && check > 0 {
		// client-go's HTTP/2 transport reads these when it opens a
		// connection, over its own settings.
		// A ping after a third of check without a frame, which must be
		// answered within the rest: a dead connection is closed within
		// check of its last frame, and a live one is closed by mistake only
		// if its answer takes two thirds of check.
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: check / 3, PingTimeout: check - check/3}
	}
	if conns != nil && rest.IsConfigTransportTLS(*cfg) && len(cfg.NextProtos) == 0 {
		// Busy watches read from HTTP/1.1 connections of their own, which
		// they leave when quiet for check (see internal/watcher).
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
