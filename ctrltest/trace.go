package ctrltest

import (
	"fmt"
	"slices"
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
// reconciles' lines and ctrl's retries. failed hears of each reconcile
// that failed and is retried: its controller and key, and its error.
func (t *trace) logger(name string, failed func(key, err string)) logr.Logger {
	l := funcr.New(func(prefix, args string) {
		t.add("%s log %s %s", name, prefix, args)
	}, funcr.Options{Verbosity: 1})
	return logr.New(&retrySink{LogSink: l.GetSink(), failed: failed})
}

// The lines ctrl logs when a reconcile failed and is retried (worker.go).
const (
	logRetry         = "reconcile failed; retrying with backoff"
	logConflictRetry = "reconcile hit a conflict; retrying"
)

// retrySink passes a log on, telling failed of ctrl's retries.
type retrySink struct {
	logr.LogSink
	values []any
	failed func(key, err string)
}

func (s *retrySink) WithValues(kv ...any) logr.LogSink {
	return &retrySink{LogSink: s.LogSink.WithValues(kv...), values: append(slices.Clip(s.values), kv...), failed: s.failed}
}

func (s *retrySink) WithName(name string) logr.LogSink {
	return &retrySink{LogSink: s.LogSink.WithName(name), values: s.values, failed: s.failed}
}

func (s *retrySink) Error(err error, msg string, kv ...any) {
	if msg == logRetry && err != nil {
		s.failed(s.key(), err.Error())
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s *retrySink) Info(level int, msg string, kv ...any) {
	if msg == logConflictRetry {
		if err, ok := value(kv, "err").(string); ok {
			s.failed(s.key(), err)
		}
	}
	s.LogSink.Info(level, msg, kv...)
}

// key names the reconciled key from the logger's values.
func (s *retrySink) key() string {
	k := fmt.Sprintf("controller %q: %v/%v", value(s.values, "controller"), value(s.values, "namespace"), value(s.values, "name"))
	if c := value(s.values, "cluster"); c != nil {
		k += fmt.Sprintf(" in cluster %v", c)
	}
	return k
}

// value returns the last value of key in a logr key/value list.
func value(kv []any, key string) any {
	var v any
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			v = kv[i+1]
		}
	}
	return v
}
