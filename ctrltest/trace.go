package ctrltest

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// trace is what one run's managers sent and saw, with their log, in order:
// the context a finding shows around its plan's injection.
type trace struct {
	start time.Time
	mu    sync.Mutex
	lines []string
	at    int // index of the first injection's line, or -1
}

func newTrace() *trace { return &trace{start: time.Now(), at: -1} }

func (t *trace) add(format string, args ...any) {
	line := fmt.Sprintf("%7.3fs  ", time.Since(t.start).Seconds()) + fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.lines = append(t.lines, line)
	t.mu.Unlock()
}

// mark adds the line of an injection.
func (t *trace) mark(what string) {
	t.add(">>> %s", what)
	t.mu.Lock()
	if t.at < 0 {
		t.at = len(t.lines) - 1
	}
	t.mu.Unlock()
}

// around returns up to before lines before the first injection and after
// lines from it on; the whole end of the trace if nothing was injected.
func (t *trace) around(before, after int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.at
	if at < 0 {
		at = len(t.lines)
	}
	lo, hi := max(0, at-before), min(len(t.lines), at+after)
	return append([]string(nil), t.lines[lo:hi]...)
}

// injection returns the first injection's line without its time, or "".
func (t *trace) injection() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at < 0 {
		return ""
	}
	_, what, _ := strings.Cut(t.lines[t.at], ">>> ")
	return what
}

// logger sends a manager's log (to V(1), and errors) to the trace: its
// reconciles' lines and ctrl's retries.
func (t *trace) logger(name string) logr.Logger {
	return funcr.New(func(prefix, args string) {
		t.add("%s log %s %s", name, prefix, args)
	}, funcr.Options{Verbosity: 1})
}
