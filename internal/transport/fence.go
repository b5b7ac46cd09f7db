package transport

import (
	"context"
	"io"
	"net/http"

	"github.com/typedctrl/ctrl/internal/leader"
)

// fence refuses a write whose context carries a leadership that has ended,
// as the request leaves and each time the transport reads its body: a
// request may leave long after the client's own check (a rate limiter's
// wait, a retry, a pause), and the server, which reads the whole body
// before it acts, drops a request cut short.
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

func (f fence) WrappedRoundTripper() http.RoundTripper { return f.rt }

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
