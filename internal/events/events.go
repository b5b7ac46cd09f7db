// Package events sends a manager's Kubernetes Events: per cluster one
// client-go broadcaster, started by the first event, and a recorder per
// component, while the manager runs.
package events

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Sinks holds the broadcasters of a manager's clusters. Bind returns the
// binding of Events in a cluster ("" for the manager's own); Lost reports
// whether this replica's last leadership ended other than by its release,
// after which what it emitted is dropped, not sent.
type Sinks struct {
	Bind func(cluster string) (*binding.Binding[*corev1.Event], error)
	Lost func() bool

	mu       sync.Mutex
	running  bool
	clusters map[string]*clusterEvents
}

type clusterEvents struct {
	broadcaster record.EventBroadcaster
	recorders   map[string]record.EventRecorder
}

// Start lets recorders send events, and returns the function that stops
// the broadcasters, flushing what they hold.
func (s *Sinks) Start() func() {
	s.mu.Lock()
	s.running, s.clusters = true, map[string]*clusterEvents{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		clusters := s.clusters
		s.running, s.clusters = false, nil
		s.mu.Unlock()
		for _, ce := range clusters {
			ce.broadcaster.Shutdown()
		}
	}
}

// StopIn stops the broadcaster of a member cluster that left.
func (s *Sinks) StopIn(cluster string) {
	s.mu.Lock()
	ce := s.clusters[cluster]
	delete(s.clusters, cluster)
	s.mu.Unlock()
	if ce != nil {
		ce.broadcaster.Shutdown()
	}
}

// Recorder returns the recorder of component in cluster, or nil if events
// cannot be sent now (the manager does not run, or the cluster does not
// serve Events).
func (s *Sinks) Recorder(cluster, component string) record.EventRecorder {
	s.mu.Lock()
	running, ce := s.running, s.clusters[cluster]
	s.mu.Unlock()
	if !running {
		return nil
	}
	if ce == nil {
		b, err := s.Bind(cluster)
		if err != nil {
			return nil
		}
		bc := record.NewBroadcaster(record.WithSleepDuration(time.Second))
		bc.StartRecordingToSink(sink{b, s.Lost})
		s.mu.Lock()
		if cur := s.clusters[cluster]; cur != nil || !s.running {
			s.mu.Unlock()
			bc.Shutdown() // raced with another event, or with the stop
			return s.Recorder(cluster, component)
		}
		ce = &clusterEvents{broadcaster: bc, recorders: map[string]record.EventRecorder{}}
		s.clusters[cluster] = ce
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := ce.recorders[component]
	if !ok {
		rec = ce.broadcaster.NewRecorder(nil, corev1.EventSource{Component: component})
		ce.recorders[component] = rec
	}
	return rec
}

// sink writes the recorder's Events through the binding, in the
// background, after the reconcile that emitted them: once this replica
// has lost the lead they are dropped, as if sent (an error would make the
// broadcaster retry).
type sink struct {
	b    *binding.Binding[*corev1.Event]
	lost func() bool
}

func (s sink) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (s sink) Create(e *corev1.Event) (*corev1.Event, error) {
	if s.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Create(ctx, e, metav1.CreateOptions{})
}

func (s sink) Update(e *corev1.Event) (*corev1.Event, error) {
	if s.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Update(ctx, e, metav1.UpdateOptions{})
}

func (s sink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if s.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Patch(ctx, e.Namespace, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
