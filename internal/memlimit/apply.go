package memlimit

import (
	"os"
	"runtime/debug"

	"github.com/go-logr/logr"
)

// containerRoot is where Container reads the container's limit; tests move
// it.
var containerRoot = "/"

// Apply sets the process's soft memory limit as the manager's
// Options.MemoryLimit (option) asks, and turns the collector's
// proportional pacing off unless GOGC asks for it: with a limit, the
// collector runs when the heap nears it, not each time the heap has
// doubled. It logs the limit it sets to log. fakes says the manager runs
// on client-go's fakes: a test, which gets no limit from its container.
func Apply(option int64, fakes bool, log logr.Logger) {
	limit, from := choose(option, fakes)
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		debug.SetGCPercent(-1)
		gogc = "off"
	}
	log.Info("memory limit set", "bytes", limit, "from", from, "GOGC", gogc)
}

// choose returns the limit Apply sets, and where it comes from; 0 when it
// sets none. GOMEMLIMIT and a negative option leave the runtime alone.
func choose(option int64, fakes bool) (int64, string) {
	switch {
	case option < 0, os.Getenv("GOMEMLIMIT") != "":
		return 0, ""
	case option > 0:
		return option, "Options.MemoryLimit"
	case fakes:
		return 0, ""
	}
	limit, ok := Container(containerRoot)
	if !ok {
		return 0, ""
	}
	return limit - limit/5, "the container's limit, less a fifth"
}
