package ctrl

import (
	"errors"
	"fmt"
	"maps"
	"runtime/debug"

	"github.com/go-logr/logr"
)

// Update filters decide which updates are worth a reconcile. Each takes the
// old and the new state of an object; an update passes if any filter of the
// list returns true. Pass them to [Controller.FilterUpdates], [Owns] and
// [Watches]; any func(old, obj O) bool of your own works the same way.

// GenerationChanged reports whether metadata.generation changed: the spec
// changed, not only the status or metadata.
func GenerationChanged[T Object](old, obj T) bool { return old.GetGeneration() != obj.GetGeneration() }

// LabelsChanged reports whether the labels changed.
func LabelsChanged[T Object](old, obj T) bool {
	return !maps.Equal(old.GetLabels(), obj.GetLabels())
}

// AnnotationsChanged reports whether the annotations changed.
func AnnotationsChanged[T Object](old, obj T) bool {
	return !maps.Equal(old.GetAnnotations(), obj.GetAnnotations())
}

func checkFilters[O Object](filters []func(old, obj O) bool) error {
	for _, f := range filters {
		if f == nil {
			return errors.New("nil filter")
		}
	}
	return nil
}

// passes reports whether an update passes filters; a panic passes, logged.
func passes[O Object](filters []func(old, obj O) bool, old, obj O, log logr.Logger) (pass bool) {
	if len(filters) == 0 {
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			log.Error(fmt.Errorf("panic: %v", r), "update filter panicked; taking the update", "object", KeyOf(obj), "stack", string(debug.Stack()))
			pass = true
		}
	}()
	for _, f := range filters {
		if f(old, obj) {
			return true
		}
	}
	return false
}
