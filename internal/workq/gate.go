package workq

import (
	"sync"
	"sync/atomic"
)

// Idle workers wait at the queue's gate, not in the workqueue's Get, so
// that the goroutine that queues a key can take it itself without waking
// one ([Queue.AddAndTake]).
//
// Readying a parked goroutine while a processor is idle makes the Go
// runtime wake a thread to run it: a futex wake, a spin and a futex sleep,
// about a third of a controller's CPU per watch event when events come
// one at a time. A watch's reader that reconciles the key it just queued
// pays none of it.
//
// Takers (workers, and a caller of AddAndTake) take keys one at a time,
// holding taking, so a key seen queued is still there when Get is called;
// the workqueue's Get then returns at once. A taker takes only while fewer
// keys than Workers are handed out: a key taken by AddAndTake holds a
// worker's place, and Workers stays the bound on concurrent reconciles.
type gate struct {
	taking sync.Mutex // held from seeing a key queued to taking it

	idle  atomic.Int32  // takers in wait
	epoch atomic.Uint64 // counts keys queued, places freed and the shutdown
	// claiming is set while AddAndTake queues a key it means to take: a key
	// queued meanwhile wakes nobody, and missed says so (see queued).
	claiming atomic.Bool
	missed   atomic.Bool
	starved  atomic.Bool // a taker waits for a place, not for a key
	closing  atomic.Bool // shut down: takers wait for every key given back

	mu     sync.Mutex
	cond   sync.Cond // on mu
	closed bool      // shut down
}

// testHookClaiming, if set, runs while AddAndTake claims a key.
var testHookClaiming func()

func (g *gate) init() { g.cond.L = &g.mu }

// Idle returns how many takers wait at the gate.
func (q *Queue[K, C, E]) Idle() int { return int(q.gate.idle.Load()) }

// queued is told of each key the workqueue queues, under its lock.
func (g *gate) queued() {
	g.epoch.Add(1)
	if g.claiming.Load() {
		// The claimer wakes a worker for it once done, if it took another.
		g.missed.Store(true)
		if g.claiming.Load() {
			return
		}
	}
	g.wake()
}

// wake signals one waiting taker, if any waits.
func (g *gate) wake() {
	if g.idle.Load() > 0 {
		g.mu.Lock()
		g.cond.Signal()
		g.mu.Unlock()
	}
}

// freed is told of each key given back: a taker may wait for its place,
// or, once the queue shuts down, for the last key to end.
func (g *gate) freed() {
	if g.starved.Load() || g.closing.Load() {
		g.epoch.Add(1)
		g.starved.Store(false)
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// wait returns when ready does, or after a key was queued, a place freed
// or the queue shut down since it was called: the caller checks again.
func (g *gate) wait(ready func() bool) {
	g.idle.Add(1)
	defer g.idle.Add(-1)
	e := g.epoch.Load()
	if ready() {
		return
	}
	g.mu.Lock()
	if g.epoch.Load() == e && !g.closed {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// shutDown wakes every waiting taker.
func (g *gate) shutDown() {
	g.closing.Store(true)
	g.epoch.Add(1)
	g.mu.Lock()
	g.closed = true
	g.cond.Broadcast()
	g.mu.Unlock()
}
