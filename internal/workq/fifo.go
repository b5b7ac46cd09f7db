package workq

// fifo orders the workqueue's keys. client-go's default is a slice that
// Pop reslices, so the first key pushed after the queue empties gets an
// array of its own: an allocation per event when events come one at a
// time, as they do between bursts. fifo is a ring that keeps its array;
// it grows when full and lets a large array go once the queue empties.
// The workqueue calls it under its lock.
type fifo[K comparable] struct {
	buf    []K
	head   int    // index of the first key
	n      int    // keys held
	queued func() // told of each key pushed; may be nil
}

// keepCap is the largest array an empty fifo keeps.
const keepCap = 256

func (f *fifo[K]) Touch(K) {}

func (f *fifo[K]) Push(k K) {
	if f.n == len(f.buf) {
		buf := make([]K, max(16, 2*len(f.buf)))
		c := copy(buf, f.buf[f.head:])
		copy(buf[c:], f.buf[:f.head])
		f.buf, f.head = buf, 0
	}
	f.buf[(f.head+f.n)%len(f.buf)] = k
	f.n++
	if f.queued != nil {
		f.queued()
	}
}

func (f *fifo[K]) Len() int { return f.n }

// Pop removes the first key; the workqueue calls it only when Len > 0.
func (f *fifo[K]) Pop() K {
	k := f.buf[f.head]
	var zero K
	f.buf[f.head] = zero // the array holds no key handed out
	f.head = (f.head + 1) % len(f.buf)
	f.n--
	if f.n == 0 {
		f.head = 0
		if len(f.buf) > keepCap {
			f.buf = nil
		}
	}
	return k
}
