package watcher

import (
	"context"
	"io"
	"net/http"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// A watch whose connection dies (a failed HTTP/2 ping closes it, say) ends
// with an error that the reflector only logs: its run loop goes on as if
// the watch had ended normally. The cache must know, to report the outage
// and its blindness from the last event, so the error is caught where it
// happens: the watch request's context carries the cache's reporter, and
// the transport (WrapTransport) hands it every error of reading that
// request's response body.

type reporterKey struct{}

// withStreamReporter returns ctx carrying report, for the watch request
// made with it.
func withStreamReporter(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, reporterKey{}, report)
}

// WrapTransport returns rt, watching the response bodies of the requests
// whose context carries a stream reporter: an error reading one, other
// than the end of the stream, is reported while the request's context is
// alive. It suits rest.Config.Wrap. Other requests pass through untouched.
func WrapTransport(rt http.RoundTripper) http.RoundTripper { return streamTransport{rt} }

type streamTransport struct{ rt http.RoundTripper }

func (t streamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A reconcile on a watch's reader moves the reading away before it
	// waits for the server (inline.go).
	YieldFrom(req.Context())
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if report, ok := req.Context().Value(reporterKey{}).(func(error)); ok && resp.Body != nil {
		resp.Body = &streamBody{ReadCloser: resp.Body, ctx: req.Context(), report: report}
	}
	return resp, nil
}

// WrappedRoundTripper lets client-go's helpers find the transport below.
func (t streamTransport) WrappedRoundTripper() http.RoundTripper { return t.rt }

// streamBody reports the first read error of a watch stream that is not
// its end. A stream that ends with what looks like a closed connection
// (EOF, a reset, a GOAWAY) or a timeout is not reported: the watch is
// opened again, and if the server cannot be reached, that request says
// so. client-go's StreamWatcher draws the same line: what it turns into an
// error event is reported here.
type streamBody struct {
	io.ReadCloser
	ctx      context.Context
	report   func(error)
	reported bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.reported && b.ctx.Err() == nil && !utilnet.IsProbableEOF(err) && !utilnet.IsTimeout(err) {
		b.reported = true
		b.report(err)
	}
	return n, err
}
