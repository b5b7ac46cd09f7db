package ctrl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/shard"
)

// labeler is the cache of one sharded type's unlabeled objects, made once
// the ring is known to need labels, and what labels them.
type labeler struct {
	id    string // type and scope: one labeler for controllers of one type alike
	opts  CacheOptions
	cache *Cache[*metav1.PartialObjectMetadata]
	patch func(ctx context.Context, key Key, data []byte) error
}

// startLabelers starts a cache of each sharded type's unlabeled objects,
// metadata only, in label mode; each change wakes the ring's loop.
func (m *Manager) startLabelers() error {
	s := m.sharding
	for i := range s.labelers {
		l := &s.labelers[i]
		if l.cache != nil {
			continue
		}
		c, err := makeCache(m, l.opts, use[*metav1.PartialObjectMetadata]{
			handler: poker[*metav1.PartialObjectMetadata]{s}, private: "shard-labels", trim: trimForLabeler, pin: true})
		if err != nil {
			return fmt.Errorf("ctrl: ring %s: %w", s.ring, err)
		}
		l.cache = c
	}
	return nil
}

// trimForLabeler keeps what the labeler reads of an object.
func trimForLabeler(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels}}
}

// labelFor returns the shard label an object should carry, and the point
// it places the object at.
func (s *sharding) labelFor(obj Object) (string, uint64) {
	if s.byNamespace {
		return obj.GetNamespace(), shard.Hash(obj.GetNamespace())
	}
	b := shard.BucketOf(shard.Hash(string(obj.GetUID())))
	return strconv.Itoa(b), shard.BucketSpan(b).First
}

// label gives the objects this replica serves that carry no shard label
// yet their label, and returns how many it wrote.
func (m *Manager) label(ctx context.Context) int {
	s := m.sharding
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	n := 0
	for _, l := range s.labelers {
		for _, o := range l.cache.List("", nil) {
			v, p := s.labelFor(o)
			key := KeyOf(o)
			s.mu.Lock()
			rv, tried := s.labeled[key]
			mine := s.serving.Contains(p) && (!tried || rv != o.ResourceVersion)
			if mine {
				s.labeled[key] = o.ResourceVersion // not again until the object changes
			}
			s.mu.Unlock()
			if !mine {
				continue
			}
			n++
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				patch := shard.LabelPatch(o.ResourceVersion, s.label, v)
				err := l.patch(ctx, key, patch)
				switch {
				case err == nil:
					m.metrics.ShardLabels.WithLabelValues(s.ring).Inc()
				case ctx.Err() == nil && IgnoreNotFound(err) != nil:
					m.log.V(1).Info("cannot label an object for its shard; trying again", "object", key, "err", err.Error())
					s.mu.Lock()
					delete(s.labeled, key)
					s.mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Forget the objects that left the labelers' caches: labeled, or gone.
	s.mu.Lock()
	tried := slices.Collect(maps.Keys(s.labeled))
	s.mu.Unlock()
	for _, key := range tried {
		if !slices.ContainsFunc(s.labelers, func(l labeler) bool { _, ok := l.cache.Get(key); return ok }) {
			s.mu.Lock()
			delete(s.labeled, key)
			s.mu.Unlock()
		}
	}
	return n
}
