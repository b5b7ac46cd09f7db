package ctrl

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Recorder emits Events about objects of T as client-go's recorder does
// (aggregated and rate-limited by its correlator), written in the
// background, never blocking or failing. [Manager.WaitIdle] waits until
// they are written. Events emitted before Start, after it returns, while
// not leading, or unsent when the lead is lost are dropped. It may be made
// before or after [Manager.Start]; it is safe for concurrent use.
type Recorder[T Object] struct {
	m       *Manager
	info    binding.Info
	source  string
	cluster string
}

// NewRecorder returns a recorder of events about objects of type T, reported
// by component (usually the controller's name). It returns an error if T is
// not a known resource or Events cannot be written.
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
	m.grants.Need(schema.GroupResource{Resource: "events"}, "create", "update", "patch")
	return &Recorder[T]{m: m, info: info, source: component}, nil
}

// InCluster returns a recorder of the same events in cluster, a fleet
// member ("" the own), where events about its objects belong.
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
	rec := r.m.events.Recorder(r.cluster, r.source)
	if rec == nil || !r.m.acting() {
		return
	}
	// Built from the binding: the recorder needs no Scheme then.
	ref := reference(r.info.GVK(), obj)
	rec.Eventf(&ref, eventType, reason, format, args...)
}
