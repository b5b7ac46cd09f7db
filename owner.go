package ctrl

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

// Owns makes c reconcile the controlling owner of T's kind
// ([SetControllerReference]) of each object of type O created, updated or
// deleted; updates pass only if one of changed (if any) reports true, such
// as [GenerationChanged]. O is given, T is inferred:
//
//	deployments, err := ctrl.Owns[*appsv1.Deployment](c, ctrl.GenerationChanged)
//
// It returns the cache of O it watches (to add indexes to), which follows
// the namespaces of c's cache: an existing cache of O, optional or not, or
// a new required one. Called while running, it reconciles the owners of
// cached objects; [Unwatch] removes it. It returns an error if O is not a
// known, watchable resource, a filter is nil, or c was stopped.
func Owns[O, T Object](c *Controller[T], changed ...func(old, obj O) bool) (*Cache[O], error) {
	if err := checkFilters(changed); err != nil {
		return nil, fmt.Errorf("ctrl: %s: Owns: %w", c, err)
	}
	m := c.mgr
	opts, err := ownedOptions[O](c, c.cache.currentScope().Namespaces)
	if err != nil {
		return nil, fmt.Errorf("ctrl: %s: Owns: %w", c, err)
	}
	owned, err := makeCache(m, opts, use[O]{either: true, share: c.ownedShare()})
	if err != nil {
		return nil, fmt.Errorf("ctrl: %s: Owns: %w", c, err)
	}
	gvk := c.cache.b.GVK()
	h := &ownerHandler[O]{to: c, group: gvk.Group, kind: gvk.Kind, namespaced: c.cache.b.Namespaced,
		srcKind: owned.kind, filters: changed, log: c.log}
	owned.addLiveHandler(h)
	l := &link{src: owned, remove: func() { owned.removeHandler(h) }}
	// follow runs under c.wiring, which guards l.
	l.follow = func(namespaces []string) managedCache {
		cur := l.src.(*Cache[O])
		opts, err := ownedOptions[O](c, namespaces)
		var moved *Cache[O]
		if err == nil {
			moved, err = makeCache(m, opts, use[O]{either: true, share: c.ownedShare()})
		}
		if err != nil {
			c.log.Error(err, "Owns: the owned objects cannot follow the controller's namespaces")
			return nil
		}
		if moved == cur {
			return moved // counted twice now: once less
		}
		cur.copyIndexes(moved)
		moved.addLiveHandler(h)
		cur.removeHandler(h)
		c.mu.Lock()
		l.src, l.remove = moved, func() { moved.removeHandler(h) }
		c.mu.Unlock()
		return cur
	}
	if err := c.addLink(l); err != nil {
		return nil, fmt.Errorf("ctrl: %s: Owns: %w", c, err)
	}
	return owned, nil
}

// ownedOptions: the controller's namespaces (nil: all), if namespaced.
func ownedOptions[O, T Object](c *Controller[T], namespaces []string) (CacheOptions, error) {
	opts := CacheOptions{Fleet: c.cache.opts.Fleet}
	if c.cache.b.Namespaced {
		opts.Namespaces = namespaces
		if len(namespaces) == 0 {
			opts.Namespaces = []string{""} // all, not the manager's default
		}
	}
	return opts, nil
}

func (c *Controller[T]) ownedShare() shareKind {
	if c.cache.share != nil {
		return relatedShare
	}
	return noShare
}

type ownerHandler[O Object] struct {
	to          target
	group, kind string
	namespaced  bool
	srcKind     string
	filters     []func(old, obj O) bool
	log         logr.Logger
}

func (h *ownerHandler[O]) owner(key Key, obj O) (Key, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != h.kind {
		return Key{}, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != h.group {
		return Key{}, false
	}
	k := Key{Name: ref.Name, Cluster: key.Cluster}
	if h.namespaced {
		k.Namespace = key.Namespace
	}
	return k, true
}

func (h *ownerHandler[O]) changed(ev event[O]) {
	if ev.kind == joined {
		h.to.enqueueAll(Cause{Trigger: TriggerJoined, Object: ev.key})
		return
	}
	if ev.kind == forgotten || ev.kind == updated && !passes(h.filters, ev.old, ev.obj, h.log) {
		return // out of reach, or filtered
	}
	cause := Cause{Trigger: TriggerOwned, Kind: h.srcKind, Object: ev.key}
	k, ok := h.owner(ev.key, ev.obj)
	if ok {
		h.to.enqueue(k, cause)
	}
	if ev.kind == updated {
		if was, had := h.owner(ev.key, ev.old); had && (!ok || was != k) {
			h.to.enqueue(was, cause) // the old owner lost its child
		}
	}
}

func (h *ownerHandler[O]) listed(evs []event[O]) {
	var keys []Key
	for _, ev := range evs {
		if k, ok := h.owner(ev.key, ev.obj); ok {
			keys = append(keys, k)
		}
	}
	h.to.enqueueListed(keys, Cause{Trigger: TriggerListed, Kind: h.srcKind})
}

// SetControllerReference adds to obj an ownerReference to owner with
// controller=true and blockOwnerDeletion=true: [Owns] maps obj's changes to
// owner, and the garbage collector deletes obj with owner. It returns an
// error if obj has another controller, if owner is namespaced and obj is
// not in its namespace, or if O is not a known resource.
func SetControllerReference[O Object](owner O, obj metav1.Object) error {
	gvk, namespaced, err := ownerKind(owner)
	if err != nil {
		return fmt.Errorf("ctrl: SetControllerReference: %w", err)
	}
	if namespaced && owner.GetNamespace() != obj.GetNamespace() {
		return fmt.Errorf("ctrl: SetControllerReference: %s %s cannot own %s in namespace %q", gvk.Kind, KeyOf(owner), obj.GetName(), obj.GetNamespace())
	}
	ref := *metav1.NewControllerRef(owner, gvk)
	refs := slices.Clone(obj.GetOwnerReferences())
	for i, r := range refs {
		if r.Controller == nil || !*r.Controller {
			continue
		}
		if gv, _ := schema.ParseGroupVersion(r.APIVersion); gv.Group != gvk.Group || r.Kind != gvk.Kind || r.Name != ref.Name {
			return fmt.Errorf("ctrl: SetControllerReference: %s is already controlled by %s %s", obj.GetName(), r.Kind, r.Name)
		}
		refs[i] = ref
		obj.SetOwnerReferences(refs)
		return nil
	}
	obj.SetOwnerReferences(append(refs, ref))
	return nil
}

func ownerKind[O Object](owner O) (schema.GroupVersionKind, bool, error) {
	if u, ok := any(owner).(*unstructured.Unstructured); ok {
		gvk := u.GroupVersionKind()
		if gvk.Version == "" || gvk.Kind == "" {
			return gvk, false, fmt.Errorf("%T %s has no apiVersion and kind", u, KeyOf(u))
		}
		return gvk, u.GetNamespace() != "", nil
	}
	info, err := binding.Lookup[O]()
	if info.ScopeUnknown { // known to the manager, not here: the owner says
		return info.GVK(), owner.GetNamespace() != "", err
	}
	return info.GVK(), info.Namespaced, err
}

func (h *ownerHandler[O]) user() string { return h.to.name() }
