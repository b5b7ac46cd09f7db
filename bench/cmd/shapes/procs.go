package main

import (
	"fmt"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/proc"
	"github.com/typedctrl/ctrl/bench/internal/shapes"
)

// process is a running implementation binary.
type process struct{ *proc.Process[shapes.Event] }

// eventTimeout bounds every wait for an event: the binary gives up on its
// own waits after 10 minutes.
const eventTimeout = 12 * time.Minute

// expect waits for the event named want.
func (p process) expect(want string) (shapes.Event, error) {
	e, err := p.Next(fmt.Sprintf("%q", want), eventTimeout)
	if err == nil && e.Event != want {
		err = fmt.Errorf("got event %q, want %q", e.Event, want)
	}
	return e, err
}
