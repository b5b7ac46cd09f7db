// Package events sends a manager's Kubernetes Events: per cluster one
// sender, started by the first event, while the manager runs. It does what
// client-go's broadcaster does (the same correlator aggregates and
// rate-limits; writes are retried), without the broadcaster, whose queues
// drop what they cannot hold unseen: here every emitted Event is counted
// until it is written, dropped by the correlator or given up, so that
// WaitIdle can wait for it.
package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/typedctrl/ctrl/internal/binding"
)

const (
	// maxQueued bounds the Events a cluster's sender holds; more are
	// dropped (client-go's broadcaster holds 1000).
	maxQueued = 1000
	// maxTries and retryDelay: a write the server did not answer is tried
	// again, as client-go's broadcaster does (12 tries).
	maxTries   = 12
	retryDelay = time.Second
	// flushTimeout bounds the writing of the Events still queued at stop.
	flushTimeout = 5 * time.Second
)

// Sinks holds the senders of a manager's clusters. Bind returns the
// binding of Events in a cluster ("" for the manager's own); Lost reports
// whether this replica's last leadership ended other than by its release,
// after which what it emitted is dropped, not sent.
type Sinks struct {
	Bind func(cluster string) (*binding.Binding[*corev1.Event], error)
	Lost func() bool

	pending atomic.Int64 // emitted, not yet written, dropped or given up
	mu      sync.Mutex
	running bool
	senders map[string]*sender
}

// Pending returns how many emitted Events are neither written nor given up.
func (s *Sinks) Pending() int64 { return s.pending.Load() }

// Start lets recorders send events, and returns the function that stops
// the senders, writing what they hold for up to five seconds.
func (s *Sinks) Start() func() {
	s.mu.Lock()
	s.running, s.senders = true, map[string]*sender{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		senders := s.senders
		s.running, s.senders = false, nil
		s.mu.Unlock()
		for _, sd := range senders {
			sd.stop()
		}
	}
}

// StopIn stops the sender of a member cluster that left.
func (s *Sinks) StopIn(cluster string) {
	s.mu.Lock()
	sd := s.senders[cluster]
	delete(s.senders, cluster)
	s.mu.Unlock()
	if sd != nil {
		sd.stop()
	}
}

// Recorder returns the recorder of component in cluster, or nil if events
// cannot be sent now (the manager does not run, or the cluster does not
// serve Events).
func (s *Sinks) Recorder(cluster, component string) *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	sd := s.senders[cluster]
	if sd == nil {
		b, err := s.Bind(cluster)
		if err != nil {
			return nil
		}
		sd = &sender{
			b: b, lost: s.Lost, pending: &s.pending,
			correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{}),
			wake:       make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{}),
		}
		go sd.run()
		s.senders[cluster] = sd
	}
	return &Recorder{s: sd, source: corev1.EventSource{Component: component}}
}

// Recorder makes Events of one component and queues them to its cluster's
// sender. It is safe for concurrent use.
type Recorder struct {
	s      *sender
	source corev1.EventSource
}

// Eventf queues an Event about ref, as client-go's recorder makes it.
func (r *Recorder) Eventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...any) {
	if eventType != corev1.EventTypeNormal && eventType != corev1.EventTypeWarning {
		return // client-go's recorder drops them too, with a log line
	}
	t := metav1.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	r.s.queue(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, t.UnixNano()), Namespace: namespace},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        fmt.Sprintf(format, args...),
		FirstTimestamp: t,
		LastTimestamp:  t,
		Count:          1,
		Type:           eventType,
		Source:         r.source,
	})
}

// sender writes the Events of one cluster, in order, in the background,
// after the reconcile that emitted them: once this replica has lost the
// lead they are dropped.
type sender struct {
	b          *binding.Binding[*corev1.Event]
	lost       func() bool
	pending    *atomic.Int64
	correlator *record.EventCorrelator // used by run only

	mu       sync.Mutex
	queued   []*corev1.Event
	stopping bool
	wake     chan struct{}
	stopped  chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func (s *sender) queue(e *corev1.Event) {
	s.mu.Lock()
	if s.stopping || len(s.queued) >= maxQueued {
		s.mu.Unlock()
		return
	}
	s.pending.Add(1)
	s.queued = append(s.queued, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop ends run after it wrote what was queued, for up to flushTimeout,
// and waits for it.
func (s *sender) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		close(s.stopped)
	})
	<-s.done
}

func (s *sender) run() {
	defer close(s.done)
	var flush <-chan time.Time // set once stopped
	for {
		s.mu.Lock()
		batch := s.queued
		s.queued = nil
		s.mu.Unlock()
		for i, e := range batch {
			s.send(e, flush)
			s.pending.Add(-1)
			if flush != nil && expired(flush) {
				s.pending.Add(-int64(len(batch) - i - 1))
				return
			}
		}
		if flush != nil {
			s.mu.Lock()
			empty := len(s.queued) == 0
			s.mu.Unlock()
			if empty {
				return
			}
			continue
		}
		select {
		case <-s.wake:
		case <-s.stopped:
			t := time.NewTimer(flushTimeout)
			defer t.Stop()
			flush = t.C
		}
	}
}

func expired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// send writes e as client-go's broadcaster does (recordToSink): through the
// correlator, which may drop or aggregate it, then a create, or a patch of
// the aggregate, retried while the server does not answer. After stop
// (flush set) it is tried once.
func (s *sender) send(e *corev1.Event, flush <-chan time.Time) {
	result, err := s.correlator.EventCorrelate(e)
	if err != nil || result.Skip {
		return
	}
	for tries := 1; ; tries++ {
		if s.write(result.Event, result.Patch) || tries == maxTries || flush != nil {
			return
		}
		select {
		case <-s.stopped:
			return // flushed by the caller, once
		case <-time.After(retryDelay):
		}
	}
}

// write writes e, or patches it if it aggregates earlier ones, and says
// whether it is done with: written, dropped, or refused for good.
func (s *sender) write(e *corev1.Event, patch []byte) bool {
	if s.lost() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out *corev1.Event
	var err error
	if e.Count > 1 {
		out, err = s.b.Patch(ctx, e.Namespace, e.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	if e.Count <= 1 || apierrors.IsNotFound(err) {
		create := *e
		create.ResourceVersion = ""
		out, err = s.b.Create(ctx, &create, metav1.CreateOptions{})
	}
	if err == nil {
		s.correlator.UpdateState(out)
		return true
	}
	// As client-go: an answer from the server refusing the Event is final;
	// only no answer is worth another try.
	var refused *apierrors.StatusError
	return errors.As(err, &refused)
}
