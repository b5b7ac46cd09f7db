package ctrltest

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// Logger returns a logger that writes to tb.Log, for ctrl.Options.Logger in
// tests: the manager's messages and every failed reconcile show beside the
// test's own output (a failing test's always, every test's with -v), where
// the default logger discards them. Lines logged once tb has finished, by
// goroutines still stopping, are dropped rather than failing the test
// binary. Lines at V(1) and above are dropped.
func Logger(tb testing.TB) logr.Logger {
	l := &testLog{tb: tb}
	tb.Cleanup(l.end)
	return testr.NewWithInterface(l, testr.Options{})
}

// testLog passes lines to a test until it ends.
type testLog struct {
	tb    testing.TB
	mu    sync.RWMutex
	ended bool
}

func (l *testLog) Helper() { l.tb.Helper() }

func (l *testLog) Log(args ...any) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.ended {
		l.tb.Helper()
		l.tb.Log(args...)
	}
}

func (l *testLog) end() {
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
}
