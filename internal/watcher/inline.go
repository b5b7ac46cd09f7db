package watcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Inline runs.
//
// A store may leave work to run on the reader's goroutine after an event
// it stored (Config.Inline): a controller whose workers all wait reconciles the
// key the event queued there, instead of waking a worker to do it, which
// costs about a third of a controller's CPU per event when events come
// one at a time (a thread woken, spinning and put to sleep again).
//
// The reader must not stall behind such a run: the reading moves to a new
// goroutine, which goes on from the event the run followed, while the run
// goes on where it is and its goroutine ends with it. The reading moves as
// soon as the run yields ([Yield]; ctrl's transport yields before every
// request, which the run would wait for), or else when the watchdog finds
// the same run going on at two of its checks, [InlineBound] apart. A run
// may therefore wait for anything, its own cache's next event included.
type Inliner interface {
	// TakeInline returns the work the event just stored left to run on
	// the reader's goroutine, or nil. The reader calls it after every
	// event it stores, and runs what it returns at once. The work must
	// hold its inputs, taken from the store by TakeInline: once it
	// starts, the reading may move to another goroutine, which stores
	// the next events, before the work reads anything.
	TakeInline() Work
}

// Work is a run taken from a store, for the reader's goroutine.
type Work interface{ RunInline(Yield) }

// InlineBound is the watchdog's period: an inline run that neither ends
// nor yields holds the reading for at least InlineBound and at most twice
// that. The watchdog's timer runs only while events come, and each of its
// checks wakes the process: at 5 ms they cost a quarter of a controller's
// CPU per event when events come a thousand a second.
var InlineBound = 20 * time.Millisecond

// InlineShort is how long a reconcile may hold its goroutine (run before
// it ends or yields) and still count as short (Pace).
var InlineShort = time.Millisecond

// Pace says whether a controller's next reconcile may run on a watch's
// reader: while the reconciles it observed were short, whether they ran
// there or on workers. A long one (waiting on a cloud API, a database, a
// timer; rendering templates) sends the controller's keys to its workers
// until as many short ones in a row as it needs: 16 after a long one,
// twice as many after each long one that came before that, up to 4096.
// Once back, it needs half as many for each stretch of twice as many short
// ones. So a controller whose reconciles are long, or often are, rarely
// holds a reader again; one preempted now and then, or that turned quick,
// comes back. The zero Pace lets runs inline. It is safe for concurrent
// use.
type Pace struct {
	mu     sync.Mutex    // serializes changes; Inline only loads
	streak atomic.Uint32 // short reconciles in a row, or as if
	need   atomic.Uint32
}

// Inline reports whether the next reconcile may run on the reader.
func (p *Pace) Inline() bool { return p.streak.Load() >= p.need.Load() }

// Observe counts a reconcile that held its goroutine for held.
func (p *Pace) Observe(held time.Duration) {
	short := held < InlineShort
	if short && p.need.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, n := p.streak.Load(), p.need.Load()
	switch {
	case !short:
		s, n = 0, min(max(2*n, 16), 4096)
	case s+1 >= 2*n: // back for as long as it needed: forget half
		s, n = n, n/2
	default:
		s++
	}
	p.streak.Store(s)
	p.need.Store(n)
}

// Yield hands the reading over to a new goroutine, if the inline run it
// was made for still runs on the reader's. The zero Yield does nothing.
type Yield struct {
	r   *reflector
	gen uint64
}

// Now yields.
func (y Yield) Now() {
	if y.r != nil {
		y.r.handOff(y.gen, &yielded)
	}
}

// YieldKey is the key a context answers its inline run's Yield under.
type YieldKey struct{}

// YieldFrom yields the inline run whose context ctx is (or is derived
// from), if it is one's.
func YieldFrom(ctx context.Context) {
	if y, ok := ctx.Value(YieldKey{}).(Yield); ok {
		y.Now()
	}
}

// testHookRunning, if set, runs once a run is marked running, before it
// starts.
var testHookRunning func()

// Counts since the program started, for tests.
var inlined, yielded, bounded atomic.Uint64

// Stats returns how many inline runs started, and how many of them handed
// the reading over by yielding and by running past InlineBound.
func Stats() (runs, byYield, byBound uint64) {
	return inlined.Load(), yielded.Load(), bounded.Load()
}

// baton says whether the reader's goroutine runs an inline run: its
// generation, shifted left by two, and its state.
type baton struct{ atomic.Uint64 }

const (
	batonRunning uint64 = 1 // the run goes on, the reader waits for it
	batonBack    uint64 = 2 // the run ended, and its goroutine reads on
	batonHanded  uint64 = 3 // the reading moved to another goroutine
)

// runInline runs run on the reader's goroutine, c being the watch read.
// It reports whether the reading was handed over meanwhile: then the
// caller must return at once, touching nothing, c being the new reader's.
func (r *reflector) runInline(c *consumer, run Work) (handedOff bool) {
	inlined.Add(1)
	r.gen++
	gen := r.gen
	r.cur = c
	r.baton.Store(gen<<2 | batonRunning)
	r.dog.started()
	if testHookRunning != nil {
		testHookRunning()
	}
	run.RunInline(Yield{r, gen})
	return !r.baton.CompareAndSwap(gen<<2|batonRunning, gen<<2|batonBack)
}

// handOff moves the reading to a new goroutine if run gen still runs on
// the reader's.
func (r *reflector) handOff(gen uint64, why *atomic.Uint64) {
	if !r.baton.CompareAndSwap(gen<<2|batonRunning, gen<<2|batonHanded) {
		return
	}
	why.Add(1)
	c := r.cur // written before the run started, read after the swap
	go r.cycle.run(c)
}

// watchdog checks every InlineBound, while inline runs start, whether the
// run it saw at its last check still runs; if so it hands the reading over.
type watchdog struct {
	r     *reflector
	t     *time.Timer
	armed atomic.Bool

	mu      sync.Mutex // serializes checks and stop
	stopped bool
	seen    uint64 // the run going on at the last check, 0 if none
	last    uint64 // the last run started, at the last check
}

func (d *watchdog) init(r *reflector) {
	d.r = r
	d.t = time.AfterFunc(time.Hour, d.check)
	d.t.Stop()
}

// started is told of each inline run: the timer runs while runs start.
func (d *watchdog) started() {
	if d.t != nil && !d.armed.Load() && d.armed.CompareAndSwap(false, true) {
		d.t.Reset(InlineBound)
	}
}

func (d *watchdog) check() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	b := d.r.baton.Load()
	gen, running := b>>2, b&3 == batonRunning
	if running && gen == d.seen {
		d.r.handOff(gen, &bounded)
	}
	d.seen = 0
	if running {
		d.seen = gen
	}
	if gen != d.last || running {
		d.last = gen
		d.t.Reset(InlineBound)
		return
	}
	d.armed.Store(false)
	// A run started since the load above may have found the timer armed.
	if d.r.baton.Load()>>2 != gen && d.armed.CompareAndSwap(false, true) {
		d.t.Reset(InlineBound)
	}
}

func (d *watchdog) stop() {
	d.mu.Lock()
	d.stopped = true
	d.t.Stop()
	d.mu.Unlock()
}
