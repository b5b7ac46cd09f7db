package ctrl

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/typedctrl/ctrl/internal/leader"
)

// ErrStarted is returned by wiring calls made after [Manager.Start], and by
// a second Start.
var ErrStarted = errors.New("manager already started")

// ErrLeadershipLost is the error, tested with errors.Is, of a write made
// through ctrl's clients under a reconcile's context once its leadership
// ended (see the package's guarantees: One leader): it sends no request,
// and a reconcile that returns it is not retried. Start returns an error
// wrapping it when the Lease was lost, unless StandbyOnLoss is set.
var ErrLeadershipLost = leader.ErrLost

// Terminal marks err as not worth retrying: the controller logs it, counts
// it in controller_runtime_terminal_reconcile_errors_total, and reconciles
// the object again only when it changes. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string { return "terminal error: " + e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

func isTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

// IgnoreNotFound returns nil for an error that means the object does not
// exist, and err otherwise.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
