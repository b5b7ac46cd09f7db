package probe

import (
	"sync"
	"time"
)

// SummaryEvery spaces out the summaries of a [Summary].
const SummaryEvery = 10 * time.Second

// Summary counts failures during an outage, to log a summary of them now
// and then: a line each would bury the logs. The zero value is ready; it
// is safe for concurrent use.
type Summary struct {
	mu     sync.Mutex
	count  int       // failures since the last summary
	logged time.Time // when the last summary was logged
}

// Add counts a failure. It returns true, with the failures counted since
// the last summary, if a summary is due (SummaryEvery after the last).
func (s *Summary) Add() (n int, due bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if time.Since(s.logged) < SummaryEvery {
		return 0, false
	}
	n = s.count
	s.count, s.logged = 0, time.Now()
	return n, true
}
