package shapes

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Shape is what the slow controller's reconcile spends its time on: work
// that sends no request to the API server, as a call to a cloud API, a
// database, DNS or a template render does.
type Shape struct {
	// Kind is "none" (return at once), "wait" (a timer of D: waiting on
	// something outside the process) or "cpu" (D of CPU in a busy loop).
	Kind string
	D    time.Duration
}

// Variant is one configuration of the benchmark: a shape of slow's
// reconcile and the Workers of both controllers.
type Variant struct {
	Shape   Shape
	Workers int
}

// ParseVariant parses "none", "wait30ms", "cpu10ms", with an optional
// "-wN" for N workers ("wait30ms-w4"); the default is 1 worker.
func ParseVariant(s string) (Variant, error) {
	v := Variant{Workers: 1}
	spec, workers, ok := strings.Cut(s, "-w")
	if ok {
		w, err := strconv.Atoi(workers)
		if err != nil || w < 1 {
			return v, fmt.Errorf("variant %q: workers %q: want a positive number", s, workers)
		}
		v.Workers = w
	}
	switch {
	case spec == "none":
		v.Shape.Kind = "none"
		return v, nil
	case strings.HasPrefix(spec, "wait"):
		v.Shape.Kind = "wait"
	case strings.HasPrefix(spec, "cpu"):
		v.Shape.Kind = "cpu"
	default:
		return v, fmt.Errorf("variant %q: want none, wait<duration> or cpu<duration>, optionally -w<workers>", s)
	}
	d, err := time.ParseDuration(strings.TrimPrefix(spec, v.Shape.Kind))
	if err != nil || d <= 0 {
		return v, fmt.Errorf("variant %q: want a positive duration after %q", s, v.Shape.Kind)
	}
	v.Shape.D = d
	return v, nil
}

// String is the form ParseVariant reads.
func (v Variant) String() string {
	s := v.Shape.Kind
	if s != "none" {
		s += v.Shape.D.String()
	}
	if v.Workers != 1 {
		s += "-w" + strconv.Itoa(v.Workers)
	}
	return s
}

// Describe says what the variant is in words, for tables.
func (v Variant) Describe() string {
	var s string
	switch v.Shape.Kind {
	case "wait":
		s = fmt.Sprintf("%s wait", ms(v.Shape.D))
	case "cpu":
		s = fmt.Sprintf("%s of CPU", ms(v.Shape.D))
	default:
		s = "none"
	}
	if v.Workers != 1 {
		s += fmt.Sprintf(", Workers: %d", v.Workers)
	}
	return s
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
}

// Do spends the shape's time. spinPerMs is how many iterations of Spin take
// a millisecond of CPU (Calibrate); the driver measures it once and hands
// every process the same, so that a "cpu" shape is the same work in each.
func (s Shape) Do(spinPerMs int) {
	switch s.Kind {
	case "wait":
		time.Sleep(s.D)
	case "cpu":
		Spin(int(int64(spinPerMs) * int64(s.D) / int64(time.Millisecond)))
	}
}

var sink atomic.Uint64

// Spin runs n iterations of a loop the compiler cannot remove.
func Spin(n int) {
	x := uint64(n) | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Store(x)
}

// Calibrate returns how many iterations of Spin take a millisecond of this
// thread's CPU time, the best of a few tries of at least 20 ms each: time
// the thread spent waiting for a core does not count, so a busy machine
// changes it little.
func Calibrate() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	try := func(n int) (time.Duration, error) {
		t0, err := threadCPU()
		if err != nil {
			return 0, err
		}
		Spin(n)
		t1, err := threadCPU()
		return t1 - t0, err
	}
	n := 1 << 20
	for {
		d, err := try(n)
		if err != nil {
			return 0, err
		}
		if d >= 20*time.Millisecond {
			break
		}
		n *= 2
	}
	best := time.Duration(math.MaxInt64)
	for range 5 {
		d, err := try(n)
		if err != nil {
			return 0, err
		}
		best = min(best, d)
	}
	return int(int64(n) * int64(time.Millisecond) / int64(best)), nil
}

// threadCPU returns the CPU time of the calling thread. Unlike
// getrusage(RUSAGE_THREAD), clock_gettime counts the running slice too, so
// it is exact to the nanosecond, not to the last tick.
func threadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
