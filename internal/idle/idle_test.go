package idle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/internal/workq"
)

var (
	errFailing = errors.New("bucket quota")
	errStart   = errors.New("lease lost")
)

func TestWait(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	never := make(chan struct{})
	for _, tc := range []struct {
		name             string
		started, stopped chan struct{}
		busyFor          int  // calls of Busy that say "2 keys queued"
		failing          bool // Failing returns errFailing
		deadline         time.Duration
		want             []string // in the error; none: nil
		wantIs           []error
	}{
		{name: "idle at once", started: closed, stopped: never},
		{name: "idle after a while", started: closed, stopped: never, busyFor: 5},
		{name: "idle with a failing key", started: closed, stopped: never, busyFor: 2, failing: true,
			want: []string{"idle, but reconciles failed (no retry due within 1s):\nbucket quota"}, wantIs: []error{errFailing}},
		{name: "busy past the deadline", started: closed, stopped: never, busyFor: 1 << 30, failing: true, deadline: 20 * time.Millisecond,
			want:   []string{"context deadline exceeded; still busy: 2 keys queued; reconciles failing:\nbucket quota"},
			wantIs: []error{context.DeadlineExceeded, errFailing}},
		{name: "never started", started: never, stopped: never, deadline: 20 * time.Millisecond,
			want: []string{"context deadline exceeded"}, wantIs: []error{context.DeadlineExceeded}},
		{name: "stopped", started: never, stopped: closed, failing: true,
			want: []string{"manager stopped: lease lost; reconciles failing:\nbucket quota"}, wantIs: []error{errStart, errFailing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			calls := 0
			err := Wait(ctx, tc.started, tc.stopped, time.Second, Checks{
				Busy: func() string {
					if calls++; calls <= tc.busyFor {
						return "2 keys queued"
					}
					return ""
				},
				Failing: func() error {
					if tc.failing {
						return errFailing
					}
					return nil
				},
				StartErr: func() error { return errStart },
			})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				if calls != tc.busyFor+1 {
					t.Errorf("Busy called %d times, want %d", calls, tc.busyFor+1)
				}
				return
			}
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("got %v, want an error containing %q", err, want)
				}
			}
			for _, target := range tc.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("got %v, want one wrapping %v", err, target)
				}
			}
		})
	}
}

type queue struct {
	backlog, processing int64
	len, aside, waiting int
	due                 bool
}

func (q queue) BacklogLen() int64            { return q.backlog }
func (q queue) Len() int                     { return q.len }
func (q queue) Processing() int64            { return q.processing }
func (q queue) AsideLen() int                { return q.aside }
func (q queue) WaitingLen() int              { return q.waiting }
func (q queue) DueWithin(time.Duration) bool { return q.due }

func TestQueueBusy(t *testing.T) {
	for _, tc := range []struct {
		q    queue
		want string
	}{
		{queue{}, ""},
		{queue{backlog: 3, len: 1}, "3 keys of a list not yet queued"},
		{queue{len: 2, processing: 1}, "2 keys queued"},
		{queue{processing: 1}, "1 keys being reconciled"},
		{queue{aside: 4}, "4 keys set aside while other clusters' keys are reconciled"},
		{queue{waiting: 5}, "5 keys waiting for the API server"},
		{queue{due: true}, "a requeue is due within 1s"},
	} {
		if got := QueueBusy(tc.q, time.Second); got != tc.want {
			t.Errorf("QueueBusy(%+v): got %q, want %q", tc.q, got, tc.want)
		}
	}
}

type key string

func (k key) String() string { return "ns/" + string(k) }

type name string

func (n name) String() string { return string(n) }

func TestFailures(t *testing.T) {
	var failures []workq.Failure[key]
	for i := range MaxFailuresShown + 2 {
		failures = append(failures, workq.Failure[key]{Key: key(fmt.Sprint(i)), Err: errFailing, Attempts: i + 1})
	}
	errs := Failures(name(`controller "buckets"`), failures, func(k key) string {
		if k == "0" {
			return ", next retry in 1h0m0s"
		}
		return ""
	})
	if len(errs) != MaxFailuresShown+1 {
		t.Fatalf("got %d errors, want %d: %v", len(errs), MaxFailuresShown+1, errs)
	}
	if got, want := errs[0].Error(), `controller "buckets": ns/0 failed 1 times, next retry in `; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to begin %q", got, want)
	}
	if got, want := errs[1].Error(), `controller "buckets": ns/1 failed 2 times: bucket quota`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := errs[MaxFailuresShown].Error(), `controller "buckets": and 2 more keys`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(errs[1], errFailing) {
		t.Errorf("got %v, want it to wrap %v", errs[1], errFailing)
	}
}
