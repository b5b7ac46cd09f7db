package leader

import (
	"context"
	"errors"
	"fmt"

	"github.com/typedctrl/ctrl/internal/act"
)

// Election is the act.Policy of leader election: the replica that holds
// the Lease acts on every object while its term lasts.
type Election struct {
	Config Config
	// Standby makes a replica whose term ended campaign again instead of
	// returning the error.
	Standby bool
}

// Run campaigns, and calls lead while this replica holds the Lease.
func (e *Election) Run(ctx context.Context, lead func(context.Context) error) error {
	for {
		e.Config.Log.Info("waiting to become leader")
		var leadErr error
		err := Run(ctx, e.Config, func(leadCtx context.Context, _ *Term) {
			leadErr = lead(leadCtx)
		})
		switch {
		case err == nil:
			return leadErr
		case !e.Standby:
			return errors.Join(fmt.Errorf("ctrl: %w", err), leadErr)
		case leadErr != nil:
			e.Config.Log.Error(leadErr, "standing by while reconciles of the lost term still run")
		}
		e.Config.Log.Info("lost the lease: standing by")
	}
}

// Share returns nil: the leader acts on every object.
func (e *Election) Share(act.Type) (act.Share, error) { return nil, nil }

// Busy returns "": a replica that does not lead is not busy.
func (e *Election) Busy() string { return "" }

// State returns "".
func (e *Election) State() string { return "" }
