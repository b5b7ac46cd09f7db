package ctrl

import (
	"os"
	"runtime/debug"

	"github.com/typedctrl/ctrl/internal/memlimit"
)

// The process's memory budget (Options.MemoryLimit): the soft limit the Go
// runtime paces its collector by. Without one, the collector runs each
// time the heap has doubled since the last collection, so a process peaks
// near twice its live heap while a cache lists, and a small cache collects
// every few thousand events; in a container whose limit is below twice
// the heap, the first is a kill.

// containerRoot is where the container's limit is read from; tests move
// it.
var containerRoot = "/"

// memoryLimit returns the limit Start sets, and where it comes from; 0
// when it sets none.
func (m *Manager) memoryLimit() (int64, string) {
	switch {
	case m.opts.MemoryLimit < 0, os.Getenv("GOMEMLIMIT") != "":
		return 0, ""
	case m.opts.MemoryLimit > 0:
		return m.opts.MemoryLimit, "Options.MemoryLimit"
	case m.opts.FakeClientset != nil || m.opts.FakeDynamic != nil:
		return 0, "" // a test
	}
	limit, ok := memlimit.Container(containerRoot)
	if !ok {
		return 0, ""
	}
	return limit - limit/5, "the container's limit, less a fifth"
}

// applyMemoryLimit sets the process's memory limit, if any, and turns the
// collector's proportional pacing off unless GOGC asks for it: with a
// limit, the collector runs when the heap nears it.
func (m *Manager) applyMemoryLimit() {
	limit, from := m.memoryLimit()
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		debug.SetGCPercent(-1)
		gogc = "off"
	}
	m.log.Info("memory limit set", "bytes", limit, "from", from, "GOGC", gogc)
}
