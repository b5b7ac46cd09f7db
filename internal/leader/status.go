package leader

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Status is the context a program's controllers run under, one term of
// leadership at a time, for those who ask whether it leads. The zero value
// leads nowhere; it is safe for concurrent use.
type Status struct {
	mu      sync.Mutex
	ctx     context.Context
	last    context.Context  // the last non-nil ctx
	changed chan struct{}    // closed at the next change
	Gauge   prometheus.Gauge // 1 while leading, if set
}

// Leading reports whether the controllers run now under a context whose
// term has not ended, and returns a channel closed when the answer may have
// changed. It never blocks.
func (s *Status) Leading() (leading bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.ctx != nil && Check(s.ctx) == nil, s.changed
}

// Begin records ctx without telling observers yet: Set does.
func (s *Status) Begin(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.last = ctx, ctx
}

// Set records that the controllers run under ctx (nil: stopped), and tells
// observers.
func (s *Status) Set(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx = ctx
	if ctx != nil {
		s.last = ctx
	}
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	if s.Gauge != nil {
		s.Gauge.Set(map[bool]float64{true: 1, false: 0}[ctx != nil])
	}
}

// Lost reports whether the last term ended other than by release: what
// was emitted under it is not to be sent.
func (s *Status) Lost() bool {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last == nil {
		return false
	}
	err := Check(last)
	return err != nil && !errors.Is(err, ErrReleased)
}
