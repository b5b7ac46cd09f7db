// Package synced waits, at a manager's start, for its caches' first lists.
// An unserved resource fails the wait at once: it will not be served by
// waiting. A cache the server forbids to list is not waited for: it holds
// up its own controllers only, and says why in /readyz.
package synced

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Cache is what Wait reads of a cache; String names it in errors.
type Cache interface {
	fmt.Stringer
	Synced() <-chan struct{} // closed once it has listed
	Forbidden() bool         // the server refuses it a list or watch
	LastError() error        // of its last list or watch
}

// Wait blocks until every cache has synced, is forbidden, or ctx is done
// (nil). It returns an error for a cache not served or that cannot be
// listed, or one unsynced after timeout, with its last error.
func Wait(ctx context.Context, timeout time.Duration, caches []Cache) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	expired := false
	for _, c := range caches {
		for synced := false; !synced; {
			if expired {
				select {
				case <-c.Synced():
					synced = true
					continue
				default:
				}
				if c.Forbidden() {
					break // reported, and waited for by its controllers
				}
				err := fmt.Errorf("%s did not sync within %s", c, timeout)
				if last := c.LastError(); last != nil {
					err = fmt.Errorf("%w: %w", err, last)
				}
				return err
			}
			select {
			case <-c.Synced():
				synced = true
			case <-ctx.Done():
				return nil
			case <-timer.C:
				expired = true
			case <-poll.C:
				switch last := c.LastError(); {
				case c.Forbidden():
					synced = true // reported, and waited for by its controllers
				case last == nil:
				case apierrors.IsNotFound(last):
					return fmt.Errorf("%s is not served by the API server (is its CustomResourceDefinition installed?): %w", c, last)
				case errors.Is(last, binding.ErrNoListKind):
					return fmt.Errorf("%s cannot be listed: %w", c, last)
				}
			}
		}
	}
	return nil
}
