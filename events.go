package ctrl

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Recorder emits Events about objects of T through client-go's recorder
// (aggregating, rate-limited), in the background, never blocking or
// failing. Events emitted before Start, after it returns, while not
// leading, or unsent when the lead is lost are dropped. It may be made
// before or after [Manager.Start]; it is safe for concurrent use.
type Recorder[T Object] struct {
	m       *Manager
	info    binding.Info
	source  string
	cluster string
}

// NewRecorder returns a recorder of events about objects of type T, reported
// by component (usually the controller's name). It returns an error if T is
// not a known resource or Events cannot be written with the manager's
// clients.
func NewRecorder[T Object](m *Manager, component string) (*Recorder[T], error) {
	info, err := binding.InfoFor[T](nil)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewRecorder: %w", err)
	}
	if component == "" {
		return nil, fmt.Errorf("ctrl: NewRecorder for %s: empty component", info)
	}
	if _, err := bind[*corev1.Event](m, APIResource{}); err != nil && m.opts.ClusterProvider == nil && len(m.Clusters()) == 0 {
		return nil, fmt.Errorf("ctrl: NewRecorder for %s: %w", info, err)
	}
	m.need(schema.GroupResource{Resource: "events"}, "create", "update", "patch")
	return &Recorder[T]{m: m, info: info, source: component}, nil
}

// InCluster returns a recorder of the same events in cluster, a member of the
// fleet ("" for the manager's own): events about an object belong in its
// cluster ([ClusterFrom]).
func (r *Recorder[T]) InCluster(cluster string) *Recorder[T] {
	in := *r
	in.cluster = cluster
	return &in
}

// Event records an event about obj. eventType is corev1.EventTypeNormal or
// corev1.EventTypeWarning; reason is a short UpperCamelCase word.
func (r *Recorder[T]) Event(obj T, eventType, reason, message string) {
	r.Eventf(obj, eventType, reason, "%s", message)
}

// Eventf is [Recorder.Event] with a formatted message.
func (r *Recorder[T]) Eventf(obj T, eventType, reason, format string, args ...any) {
	rec := r.m.recorder(r.cluster, r.source)
	if rec == nil || !r.m.acting() {
		return
	}
	// Built from the binding: the recorder needs no Scheme then.
	ref := reference(r.info.GVK(), obj)
	rec.Eventf(&ref, eventType, reason, format, args...)
}

// eventSink holds a broadcaster per cluster and a recorder per component.
type eventSink struct {
	running  bool
	clusters map[string]*clusterEvents
}

type clusterEvents struct {
	broadcaster record.EventBroadcaster
	recorders   map[string]record.EventRecorder
}

// startEvents returns the function that stops the broadcasters, flushing them.
func (m *Manager) startEvents() func() {
	m.mu.Lock()
	m.events.running = true
	m.events.clusters = map[string]*clusterEvents{}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		clusters := m.events.clusters
		m.events.running, m.events.clusters = false, nil
		m.mu.Unlock()
		for _, ce := range clusters {
			ce.broadcaster.Shutdown()
		}
	}
}

func (m *Manager) stopEventsIn(cluster string) {
	m.mu.Lock()
	ce := m.events.clusters[cluster]
	delete(m.events.clusters, cluster)
	m.mu.Unlock()
	if ce != nil {
		ce.broadcaster.Shutdown()
	}
}

// recorder returns nil if events cannot be sent now (not running, or not served).
func (m *Manager) recorder(cluster, component string) record.EventRecorder {
	m.mu.Lock()
	running, ce := m.events.running, m.events.clusters[cluster]
	m.mu.Unlock()
	if !running {
		return nil
	}
	if ce == nil {
		b, err := bindIn[*corev1.Event](m, cluster, APIResource{})
		if err != nil {
			return nil
		}
		bc := record.NewBroadcaster(record.WithSleepDuration(time.Second))
		bc.StartRecordingToSink(sink{b, m})
		m.mu.Lock()
		if cur := m.events.clusters[cluster]; cur != nil || !m.events.running {
			m.mu.Unlock()
			bc.Shutdown() // raced with another event, or with the stop
			return m.recorder(cluster, component)
		}
		ce = &clusterEvents{broadcaster: bc, recorders: map[string]record.EventRecorder{}}
		m.events.clusters[cluster] = ce
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := ce.recorders[component]
	if !ok {
		rec = ce.broadcaster.NewRecorder(nil, corev1.EventSource{Component: component})
		ce.recorders[component] = rec
	}
	return rec
}

// sink writes Events through the binding. Once the lead is lost (not
// released) they are dropped as if sent: an error would make it retry.
type sink struct {
	b *binding.Binding[*corev1.Event]
	m *Manager
}

func (s sink) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (s sink) Create(e *corev1.Event) (*corev1.Event, error) {
	if s.m.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Create(ctx, e, metav1.CreateOptions{})
}

func (s sink) Update(e *corev1.Event) (*corev1.Event, error) {
	if s.m.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Update(ctx, e, metav1.UpdateOptions{})
}

func (s sink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if s.m.lost() {
		return e, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.b.Patch(ctx, e.Namespace, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
