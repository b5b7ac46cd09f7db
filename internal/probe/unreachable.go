package probe

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/typedctrl/ctrl/internal/leader"
)

// unreachableError is the error of a request to the API server of cluster
// that got no answer: the connection failed or died, or the server said
// it cannot serve now (503, 504).
type unreachableError struct {
	cluster string
	err     error
}

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// Tag returns err, the outcome of a request of ctx to the API server of
// cluster, marked for [Unreachable] if it means the server could not be
// reached. Only the manager's own requests are tagged, so that a failed
// call to some other service is an ordinary failure. A context that ended
// is the caller's doing; a deadline that passed while ctx is alive is the
// HTTP client's timeout: the server did not answer.
func Tag(ctx context.Context, cluster string, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var tagged *unreachableError
	if errors.As(err, &tagged) {
		return err
	}
	var status apierrors.APIStatus
	var ne net.Error
	switch {
	case errors.Is(err, leader.ErrLost):
		return err // refused before it left (see internal/transport): no server was asked
	case errors.As(err, &status):
		if !apierrors.IsServiceUnavailable(err) && !apierrors.IsTimeout(err) {
			return err
		}
	case errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &ne), utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err),
		utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err):
	default:
		return err
	}
	return &unreachableError{cluster, err}
}

// Unreachable reports whether err, or an error it wraps, was tagged by
// [Tag], and the cluster whose server could not be reached.
func Unreachable(err error) (cluster string, ok bool) {
	var u *unreachableError
	if errors.As(err, &u) {
		return u.cluster, true
	}
	return "", false
}
