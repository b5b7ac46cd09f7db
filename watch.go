package ctrl

import (
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/go-logr/logr"
)

// Watches makes controller c reconcile the keys that fn returns for each
// object of src that changes, for an update the old and the new object's;
// updates pass only if one of changed (if any) reports true. fn runs on the
// cache's goroutine: it must be fast and not block; it may read other
// caches. T and O are inferred:
//
//	err := ctrl.Watches(c, nodes, func(n *corev1.Node) []ctrl.Key { ... }, ctrl.LabelsChanged)
//
// Called while the manager runs, it maps the objects src holds at once;
// [Unwatch] removes it. It returns an error if src or fn or a filter is
// nil, src belongs to another manager or was released, or c was stopped.
func Watches[O, T Object](c *Controller[T], src *Cache[O], fn func(O) []Key, changed ...func(old, obj O) bool) error {
	if fn == nil || src == nil {
		return fmt.Errorf("ctrl: %s: Watches: nil cache or function", c)
	}
	if err := checkFilters(changed); err != nil {
		return fmt.Errorf("ctrl: %s: Watches: %w", c, err)
	}
	if src.mgr != c.mgr {
		return fmt.Errorf("ctrl: %s: Watches: %s belongs to another manager", c, src)
	}
	if err := c.mgr.use(src); err != nil {
		return fmt.Errorf("ctrl: %s: Watches: %w", c, err)
	}
	h := &mapHandler[O]{to: c, fn: fn, filters: changed, srcKind: src.kind, log: c.log}
	src.addLiveHandler(h)
	if err := c.addLink(&link{src: src, remove: func() { src.removeHandler(h) }}); err != nil {
		return fmt.Errorf("ctrl: %s: Watches: %w", c, err)
	}
	return nil
}

// mapHandler queues the keys a user function maps each changed object to.
type mapHandler[O Object] struct {
	to      target
	fn      func(O) []Key
	filters []func(old, obj O) bool
	srcKind string
	log     logr.Logger
}

// mapped calls fn, turning a panic into no keys and a log line.
func (h *mapHandler[O]) mapped(key Key, obj O) (keys []Key) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error(fmt.Errorf("panic: %v", r), "Watches mapping function panicked; the change maps to no key",
				"object", key, "stack", string(debug.Stack()))
			keys = nil
		}
	}()
	return h.fn(obj)
}

func (h *mapHandler[O]) changed(ev event[O]) {
	if ev.kind == joined {
		h.to.enqueueAll(Cause{Trigger: TriggerJoined, Object: ev.key})
		return
	}
	if ev.kind == forgotten || ev.kind == updated && !passes(h.filters, ev.old, ev.obj, h.log) {
		return // out of reach, or filtered
	}
	keys := h.mapped(ev.key, ev.obj)
	if ev.kind == updated {
		// The old object's keys too, each once: they may have lost a dependency.
		keys = union(h.mapped(ev.key, ev.old), keys)
	}
	cause := Cause{Trigger: TriggerMapped, Kind: h.srcKind, Object: ev.key}
	for _, k := range keys {
		h.to.enqueue(k, cause)
	}
}

func union(a, b []Key) []Key {
	out := make([]Key, 0, len(a)+len(b))
	seen := make(map[Key]struct{}, len(a)+len(b))
	for _, k := range slices.Concat(a, b) {
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

func (h *mapHandler[O]) listed(evs []event[O]) {
	var keys []Key
	for _, ev := range evs {
		keys = append(keys, h.mapped(ev.key, ev.obj)...)
	}
	h.to.enqueueListed(keys, Cause{Trigger: TriggerListed, Kind: h.srcKind})
}

func (h *mapHandler[O]) user() string { return h.to.name() }
