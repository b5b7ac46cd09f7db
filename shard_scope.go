package ctrl

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelop "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/shard"
)

// shardView is what a sharded cache selects at one moment; changed is
// closed when a newer view replaces it.
type shardView struct {
	serving    shard.Set
	namespaces []string // ByNamespace in label mode: the values to select
	changed    chan struct{}
}

// shardScope marks a cache as sharded. A related cache (owned by a
// sharded controller) is filtered only where the server selects by
// namespace; the objects of other types are not labeled.
type shardScope struct {
	s       *sharding
	related bool
}

// shardCache makes a sharded controller's cache options select its share,
// and, for the controller's own cache (primary), has the type probed for
// server-side selection and, in label mode, labeled. Two controllers of
// one type with equal options share the cache and its labeler.
func shardCache[T Object](m *Manager, opts CacheOptions, primary bool) (CacheOptions, error) {
	s := m.sharding
	info, err := binding.InfoFor[T](resourceInfo[T](opts.Resource))
	if err != nil {
		return opts, err
	}
	if !info.Namespaced && s.byNamespace {
		if primary {
			return opts, fmt.Errorf("Sharding.ByNamespace: %s is cluster-scoped", info)
		}
		return opts, nil // not sharded: all of it on every replica
	}
	opts.shard = &shardScope{s: s, related: !primary}
	if !primary {
		return opts, nil
	}
	b, err := bind[T](m, opts.Resource)
	if err != nil {
		return opts, err
	}
	m.need(info.GVR.GroupResource(), "patch") // label mode labels the objects
	// A namespace the program may list in, to probe the server's selection.
	ns := m.opts.Namespace
	if len(opts.Namespaces) > 0 {
		ns = opts.Namespaces[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes = append(s.probes, func(ctx context.Context) (bool, error) {
		l, err := b.List(ctx, ns, metav1.ListOptions{Limit: 1, ShardSelector: shard.All.Selector(s.field)})
		if err != nil {
			return false, fmt.Errorf("probing %s: %w", info, err)
		}
		return l.ShardInfo != nil, nil
	})
	// In label mode, a labeler watches the type's objects in the
	// controller's scope that carry no valid shard label yet.
	sel := labels.NewSelector()
	if opts.LabelSelector != nil {
		if reqs, ok := opts.LabelSelector.Requirements(); ok {
			sel = sel.Add(reqs...)
		}
	}
	var unlabeled *labels.Requirement
	if s.byNamespace {
		unlabeled, err = labels.NewRequirement(s.label, labelop.DoesNotExist, nil)
	} else {
		buckets := make([]string, shard.Buckets)
		for b := range buckets {
			buckets[b] = strconv.Itoa(b)
		}
		unlabeled, err = labels.NewRequirement(s.label, labelop.NotIn, buckets)
	}
	if err != nil {
		return opts, err
	}
	lopts := CacheOptions{Namespaces: opts.Namespaces, LabelSelector: sel.Add(*unlabeled), FieldSelector: opts.FieldSelector,
		Resource: apiResource(info)}
	id := fmt.Sprintf("%s %s", info, newScope(info, m.opts.Namespace, lopts))
	if !slices.ContainsFunc(s.labelers, func(l labeler) bool { return l.id == id }) {
		// Labels are written through a client of T, so that WaitIdle waits
		// for the controller's cache to see them.
		cl, err := NewClient[T](m, ClientOptions{Resource: opts.Resource})
		if err != nil {
			return opts, err
		}
		s.labelers = append(s.labelers, labeler{id: id, opts: lopts, patch: func(ctx context.Context, key Key, data []byte) error {
			_, err := cl.Patch(ctx, key, types.MergePatchType, data)
			return err
		}})
	}
	return opts, nil
}

// filters reports whether a cache of this scope selects a share now: a
// controller's own cache always; a related one only where the server
// selects by namespace.
func (sc *shardScope) filters() bool {
	return !sc.related || sc.s.modeIs(shardModeServer) && sc.s.byNamespace
}

// byLabel reports whether a cache of this scope selects its share by the
// shard label.
func (sc *shardScope) byLabel() bool { return sc.filters() && sc.s.modeIs(shardModeLabels) }

// point returns where obj is in the hash space, as the cache's selection
// places it: by the hashed field where the server selects, by the shard
// label in label mode. An object without a valid label is nowhere.
func (s *sharding) point(obj Object, related bool) (uint64, bool) {
	if s.modeIs(shardModeServer) || related {
		if s.byNamespace {
			return shard.Hash(obj.GetNamespace()), true
		}
		return shard.Hash(string(obj.GetUID())), true
	}
	v, ok := obj.GetLabels()[s.label]
	if !ok {
		return 0, false
	}
	if s.byNamespace {
		return shard.Hash(v), true
	}
	b, err := strconv.Atoi(v)
	if err != nil || b < 0 || b >= shard.Buckets || strconv.Itoa(b) != v {
		return 0, false
	}
	return shard.BucketSpan(b).First, true
}

// serves reports whether this replica serves obj now; for a cache of the
// scope that does not filter, always.
func (sc *shardScope) serves(obj Object) bool {
	if sc == nil || !sc.filters() {
		return true
	}
	p, ok := sc.s.point(obj, sc.related)
	if !ok {
		return false
	}
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	return sc.s.serving.Contains(p)
}

// holdsAll reports whether a cache of this scope holds every object of
// namespace ns: unsharded, or sharded by namespace where the server
// selects and ns is served here. A cache sharded by UID or by label holds
// no namespace whole.
func (sc *shardScope) holdsAll(ns string) bool {
	if sc == nil || sc.related && !sc.filters() {
		return true
	}
	if ns == "" || !sc.s.byNamespace || !sc.filters() || !sc.s.modeIs(shardModeServer) {
		return false
	}
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	return sc.s.serving.Contains(shard.Hash(ns))
}

// current returns the view caches filter on now.
func (s *sharding) current() *shardView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// labelNamespaces returns the namespaces a cache selects by label in
// label mode with ByNamespace, to be served: all of them, read before
// taking s.mu, which is never held while calling into a cache (a cache
// calls serves, which takes s.mu, while it holds its own lock).
func (s *sharding) labelNamespaces() []string {
	if !s.byNamespace || !s.modeIs(shardModeLabels) || s.namespaces == nil {
		return nil
	}
	var names []string
	for _, ns := range s.namespaces.List("", nil) {
		names = append(names, ns.Name)
	}
	return names
}

// setViewLocked replaces the view, which restarts the sharded caches'
// watches; names are labelNamespaces'. Called with s.mu held.
func (s *sharding) setViewLocked(names []string) {
	v := &shardView{serving: s.serving, changed: make(chan struct{})}
	if s.byNamespace && s.modeIs(shardModeLabels) {
		for _, ns := range names {
			if s.serving.Contains(shard.Hash(ns)) {
				v.namespaces = append(v.namespaces, ns)
			}
		}
		slices.Sort(v.namespaces)
		if s.view != nil && slices.Equal(v.namespaces, s.view.namespaces) && v.serving.Equal(s.view.serving) {
			return
		}
	}
	old := s.view
	s.view = v
	close(old.changed)
}

// selection is what a sharded feed adds to its list and watch options for
// view: a shard selector where the server selects by hash, a label
// requirement otherwise. It reports false when the view selects nothing.
func (sc *shardScope) selection(v *shardView) (shardSel string, label *labels.Requirement, any bool) {
	if !sc.filters() {
		return "", nil, true
	}
	if v.serving.Empty() {
		return "", nil, false
	}
	s := sc.s
	if s.modeIs(shardModeServer) {
		return v.serving.Selector(s.field), nil, true
	}
	var values []string
	if s.byNamespace {
		values = v.namespaces
	} else {
		for b := range shard.Buckets {
			if v.serving.Covers(shard.BucketSpan(b)) {
				values = append(values, strconv.Itoa(b))
			}
		}
	}
	if len(values) == 0 {
		return "", nil, false
	}
	req, err := labels.NewRequirement(s.label, labelop.In, values)
	if err != nil {
		return "", nil, false // a namespace is always a valid label value
	}
	return "", req, true
}
