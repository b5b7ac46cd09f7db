package ctrl

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// store is the Cache seen by the reflector: it applies each change to the
// items and indexes under the lock, then dispatches it to the handlers
// outside the lock, on the reflector's goroutine. There is no intermediate
// queue: the handlers only compute keys and add them to work queues.
type store[T Object] Cache[T]

func (s *store[T]) cache() *Cache[T] { return (*Cache[T])(s) }

// Transformer lets the reflector transform objects of a streamed initial
// list as they arrive, before Replace.
func (s *store[T]) Transformer() cache.TransformFunc {
	c := s.cache()
	c.mu.RLock()
	fn := c.transform
	c.mu.RUnlock()
	if fn == nil {
		return nil
	}
	return func(obj any) (any, error) {
		if t, ok := obj.(T); ok {
			return fn(t), nil
		}
		return obj, nil
	}
}

func (s *store[T]) prepare(obj any) (T, bool) {
	t, ok := obj.(T)
	if !ok {
		return t, false
	}
	if s.transform != nil {
		t = s.transform(t)
	}
	return t, true
}

func (s *store[T]) matches(obj T) bool {
	return s.sel == nil || s.sel.Matches(labels.Set(obj.GetLabels()))
}

func (s *store[T]) Add(obj any) error { return s.Update(obj) }

func (s *store[T]) Update(obj any) error {
	t, ok := s.prepare(obj)
	if !ok {
		return fmt.Errorf("ctrl: %s received %T", s.cache(), obj)
	}
	if !s.matches(t) { // fakes ignore label selectors on watches
		s.remove(t)
		return nil
	}
	c := s.cache()
	c.dispatching.Add(1)
	defer c.doneDispatching()
	key := KeyOf(t)
	c.mu.Lock()
	c.lastRV = t.GetResourceVersion()
	old, existed := c.items[key]
	c.items[key] = t
	for _, idx := range c.indexes {
		if existed {
			idx.remove(key, old)
		}
		idx.add(key, t)
	}
	c.observe(key, t, true)
	c.mu.Unlock()
	for _, h := range c.handlers {
		if existed {
			h.update(old, t)
		} else {
			h.add(t)
		}
	}
	return nil
}

func (s *store[T]) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := s.prepare(obj)
	if !ok {
		return fmt.Errorf("ctrl: %s received %T", s.cache(), obj)
	}
	s.remove(t)
	return nil
}

// remove deletes a prepared object and dispatches its deletion.
func (s *store[T]) remove(t T) {
	c := s.cache()
	c.dispatching.Add(1)
	defer c.doneDispatching()
	key := KeyOf(t)
	c.mu.Lock()
	c.lastRV = t.GetResourceVersion()
	old, existed := c.items[key]
	if existed {
		delete(c.items, key)
		for _, idx := range c.indexes {
			idx.remove(key, old)
		}
	}
	c.observe(key, t, false)
	c.mu.Unlock()
	if existed {
		for _, h := range c.handlers {
			h.delete(t)
		}
	}
}

// Replace installs a complete list: the first one, or a relist after the
// watch was lost. Objects whose resourceVersion did not change produce no
// event; objects missing from the list are deleted with their last known
// state.
func (s *store[T]) Replace(list []any, rv string) error {
	c := s.cache()
	c.dispatching.Add(1)
	defer c.doneDispatching()
	items := make(map[Key]T, len(list))
	for _, obj := range list {
		t, ok := s.prepare(obj)
		if !ok {
			return fmt.Errorf("ctrl: %s received %T", c, obj)
		}
		if s.matches(t) {
			items[KeyOf(t)] = t
		}
	}
	type change struct{ old, obj T }
	var added, updated, deleted []change
	c.mu.Lock()
	c.lastRV = rv
	for k, obj := range items {
		old, existed := c.items[k]
		switch {
		case !existed:
			added = append(added, change{obj: obj})
		case old.GetResourceVersion() != obj.GetResourceVersion() || old.GetResourceVersion() == "":
			updated = append(updated, change{old: old, obj: obj})
		default:
			items[k] = old // keep the instance readers may hold
			continue
		}
		c.observe(k, obj, true)
	}
	for k, old := range c.items {
		if _, ok := items[k]; !ok {
			deleted = append(deleted, change{obj: old})
			c.observe(k, old, false)
		}
	}
	c.items = items
	for _, idx := range c.indexes {
		idx.values = map[string]map[Key]struct{}{}
		for k, obj := range items {
			idx.add(k, obj)
		}
	}
	c.mu.Unlock()
	var listed []T // for handlers that take the added objects at once
	for _, h := range c.handlers {
		if l, ok := h.(listHandler[T]); ok && len(added) > 0 {
			if listed == nil {
				listed = make([]T, len(added))
				for i, ch := range added {
					listed[i] = ch.obj
				}
			}
			l.addListed(listed)
		} else {
			for _, ch := range added {
				h.add(ch.obj)
			}
		}
		for _, ch := range updated {
			h.update(ch.old, ch.obj)
		}
		for _, ch := range deleted {
			h.delete(ch.obj)
		}
	}
	if c.HasSynced() {
		c.relists.Inc()
		c.log.V(1).Info("relisted", "added", len(added), "updated", len(updated), "deleted", len(deleted))
	} else if !c.b.Fake() {
		c.markSynced()
	}
	return nil
}

func (c *Cache[T]) markSynced() { c.syncOnce.Do(func() { close(c.synced) }) }

// Resync hands every cached object to the handlers again.
func (s *store[T]) Resync() error {
	c := s.cache()
	c.dispatching.Add(1)
	defer c.doneDispatching()
	c.mu.RLock()
	objs := make([]T, 0, len(c.items))
	for _, obj := range c.items {
		objs = append(objs, obj)
	}
	c.mu.RUnlock()
	for _, h := range c.handlers {
		for _, obj := range objs {
			h.resync(obj)
		}
	}
	return nil
}

func (c *Cache[T]) doneDispatching() {
	c.dispatching.Add(-1)
	c.mgr.activity.Add(1)
}
