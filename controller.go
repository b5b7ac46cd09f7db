package ctrl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/metrics"
)

// Object is implemented by every Kubernetes API object: a pointer to a
// struct with TypeMeta and ObjectMeta and a generated DeepCopyObject, such as
// *corev1.ConfigMap or a custom resource type.
type Object interface {
	metav1.Object
	runtime.Object
}

// Key names an object: its namespace ("" for cluster-scoped objects) and
// name. Work queues hold keys, not objects, so each key is reconciled
// against the latest state of its object.
type Key struct {
	Namespace, Name string
}

// KeyOf returns the key of obj.
func KeyOf(obj metav1.Object) Key { return Key{obj.GetNamespace(), obj.GetName()} }

// String returns "namespace/name", or "name" for cluster-scoped objects.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Result tells a controller what to do after a successful reconcile. The
// zero value means done: the object is reconciled again only when it, or
// something mapped to it, changes.
type Result struct {
	// RequeueAfter, if positive, reconciles the object again after this
	// long, unless a change reconciles it sooner.
	RequeueAfter time.Duration
}

// Terminal marks err as not worth retrying: the controller logs it, counts
// it in controller_runtime_terminal_reconcile_errors_total, and does not
// requeue the object. A later change to the object reconciles it again.
// Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string { return "terminal error: " + e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// ControllerOptions configure a [Controller]. The zero value is one worker,
// [DefaultRateLimiter], and the default cache of the type.
type ControllerOptions struct {
	// Workers is how many objects are reconciled at once. Default: 1.
	Workers int
	// RateLimiter spaces out retries after errors. Default:
	// DefaultRateLimiter().
	RateLimiter RateLimiter
	// Cache selects the objects the controller reconciles. Default: every
	// object of the type in the manager's namespace.
	Cache CacheOptions
	// UnsafeDisableDeepCopy hands reconcile the cached object itself instead
	// of its own deep copy. It saves the copy's CPU and, for controllers of
	// many large objects, the heap fragmentation that a copy per reconcile
	// causes; in exchange reconcile must not modify the object (copy it
	// first with DeepCopyObject) nor keep it after returning. Default: off,
	// as controller-runtime's UnsafeDisableDeepCopy.
	UnsafeDisableDeepCopy bool
}

// Controller reconciles objects of type T: whenever an object changes, or
// an object mapped to it does, its key is queued and a worker calls the
// reconcile function with the latest cached state. Create it with
// [NewController] and wire it before [Manager.Start] with [Owns], [Watches]
// and its methods.
//
// Guarantees:
//   - a key is never reconciled by two workers at once;
//   - keys queued several times before a worker takes them are reconciled
//     once;
//   - reconcile receives its own deep copy of the cached object, which it may
//     modify;
//   - an error or a panic requeues the key with the rate limiter's backoff;
//     nothing stops the controller but the manager.
type Controller[T Object] struct {
	mgr       *Manager
	ctrlName  string
	reconcile func(context.Context, T) (Result, error)
	opts      ControllerOptions
	cache     *Cache[T]
	client    *Client[T]
	q         *queue
	log       logr.Logger
	metrics   metrics.Controller

	mu         sync.Mutex
	started    bool
	watched    []runner
	updatePass []func(old, obj T) bool
	finalizer  string
	finalize   func(context.Context, T) error
	onDelete   func(context.Context, T) error
	tombstones map[Key]T // last known state of deleted objects not yet handed to onDelete

	stopping atomic.Bool
	wg       sync.WaitGroup

	outageMu     sync.Mutex
	outageCount  int       // reconciles failed on an unreachable server since the last summary
	outageLogged time.Time // when the last summary was logged
}

// outageSummaryEvery spaces out the log lines about reconciles failing
// because the API server is unreachable.
const outageSummaryEvery = 10 * time.Second

// summarizeOutage counts a reconcile that failed because the API server is
// unreachable, and logs one line for them all every outageSummaryEvery: an
// outage fails every reconcile, and a line each would bury the logs.
func (c *Controller[T]) summarizeOutage(err error) {
	c.outageMu.Lock()
	c.outageCount++
	if time.Since(c.outageLogged) < outageSummaryEvery {
		c.outageMu.Unlock()
		return
	}
	n := c.outageCount
	c.outageCount, c.outageLogged = 0, time.Now()
	c.outageMu.Unlock()
	c.log.Info("reconciles are failing because the API server is unreachable; retrying with backoff",
		"failures", n, "lastError", err.Error())
}

// unreachable reports whether err means the API server could not be
// reached, rather than that it refused the request.
func unreachable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err)
	}
	var ne net.Error
	return errors.As(err, &ne) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// NewController returns a controller named name that calls reconcile for
// objects of type T; T is inferred from reconcile. The name labels logs and
// metrics and must be unique in the manager. It returns an error if T is
// not a known, watchable resource, if reconcile is nil, if the name is empty
// or taken, or if the manager has started.
//
// If reconcile returns an error, the key is retried with backoff and the
// Result is ignored. An object that is gone when its key comes up is not
// passed to reconcile; see [Controller.OnDelete].
func NewController[T Object](m *Manager, name string, reconcile func(context.Context, T) (Result, error), opts ControllerOptions) (*Controller[T], error) {
	if name == "" {
		return nil, errors.New("ctrl: NewController: empty name")
	}
	if reconcile == nil {
		return nil, fmt.Errorf("ctrl: NewController %q: nil reconcile function", name)
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = DefaultRateLimiter()
	}
	cache, err := NewCache[T](m, opts.Cache)
	if err != nil {
		return nil, fmt.Errorf("ctrl: NewController %q: %w", name, err)
	}
	c := &Controller[T]{
		mgr:       m,
		ctrlName:  name,
		reconcile: reconcile,
		opts:      opts,
		cache:     cache,
		client:    &Client[T]{m: m, b: cache.b},
		log:       m.log.WithValues("controller", name),
		watched:   []runner{cache},
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.started:
		return nil, fmt.Errorf("ctrl: NewController %q: %w", name, ErrStarted)
	case m.controllers[name] != nil:
		return nil, fmt.Errorf("ctrl: NewController %q: a controller with this name already exists", name)
	}
	if err := cache.addHandler(c); err != nil {
		return nil, fmt.Errorf("ctrl: NewController %q: %w", name, err)
	}
	c.metrics = m.metrics.Controller(name, opts.Workers)
	m.controllers[name] = c
	m.ctrlList = append(m.ctrlList, c)
	return c, nil
}

// Cache returns the cache of the objects the controller reconciles.
func (c *Controller[T]) Cache() *Cache[T] { return c.cache }

// Name returns the controller's name.
func (c *Controller[T]) Name() string { return c.ctrlName }

// FilterUpdates makes the controller reconcile an update only if one of
// changed reports true for the old and new object, for example
// [GenerationChanged] to ignore status-only writes. Creations, deletions,
// resyncs and updates of objects being deleted are always reconciled.
// Several calls add to the list. It returns an error after the manager
// started.
func (c *Controller[T]) FilterUpdates(changed ...func(old, obj T) bool) error {
	for _, f := range changed {
		if f == nil {
			return fmt.Errorf("ctrl: %s: FilterUpdates: nil function", c)
		}
	}
	return c.wire("FilterUpdates", func() { c.updatePass = append(c.updatePass, changed...) })
}

// Finalizer makes the controller own the finalizer name (a qualified name
// such as "example.com/cleanup") on its objects: it adds the finalizer
// before reconciling an object, and when the object is being deleted it
// calls finalize instead of reconcile and removes the finalizer once
// finalize returns nil, which lets the deletion complete. An error from
// finalize is retried with backoff. It returns an error for an invalid
// name, a second call, or after the manager started.
func (c *Controller[T]) Finalizer(name string, finalize func(ctx context.Context, obj T) error) error {
	if errs := validation.ValidateFinalizerName(name, nil); len(errs) > 0 || !strings.Contains(name, "/") || finalize == nil {
		return fmt.Errorf("ctrl: %s: Finalizer %q: want a qualified name like example.com/cleanup and a function", c, name)
	}
	var err error
	werr := c.wire("Finalizer", func() {
		if c.finalizer != "" {
			err = fmt.Errorf("ctrl: %s: Finalizer %q: already set to %q", c, name, c.finalizer)
			return
		}
		c.finalizer, c.finalize = name, finalize
	})
	return errors.Join(werr, err)
}

// OnDelete sets a function that receives the last known state of each
// object once it is gone from the API server (and from the cache), so that
// deletions without a finalizer are observable too. An error is retried with
// backoff, with the same object. If a new object with the same key exists
// by the time the key comes up, fn still receives the old one, before the
// new one is reconciled. It returns an error after the manager started.
func (c *Controller[T]) OnDelete(fn func(ctx context.Context, obj T) error) error {
	if fn == nil {
		return fmt.Errorf("ctrl: %s: OnDelete: nil function", c)
	}
	return c.wire("OnDelete", func() {
		c.onDelete = fn
		c.tombstones = map[Key]T{}
	})
}

func (c *Controller[T]) wire(what string, fn func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("ctrl: %s: %s: %w", c, what, ErrStarted)
	}
	fn()
	return nil
}

// String returns "controller <name>".
func (c *Controller[T]) String() string { return fmt.Sprintf("controller %q", c.ctrlName) }

// Owns makes controller c reconcile the controlling owner of each object of
// type O that changes: the object named by O's ownerReference with
// controller=true whose kind is T's. Set that reference with
// [SetControllerReference]. O is given, T is inferred:
//
//	err := ctrl.Owns[*corev1.ConfigMap](c)
//
// It returns an error if O is not a known, watchable resource or the manager
// has started.
func Owns[O, T Object](c *Controller[T]) error {
	opts := CacheOptions{}
	if c.cache.b.Namespaced {
		opts.Namespace = c.cache.opts.Namespace
	}
	owned, err := NewCache[O](c.mgr, opts)
	if err != nil {
		return fmt.Errorf("ctrl: %s: Owns: %w", c, err)
	}
	gvk := c.cache.b.GVK()
	h := &ownerHandler[O]{enqueue: c.enqueue, group: gvk.Group, kind: gvk.Kind, namespaced: c.cache.b.Namespaced}
	return c.watch("Owns", owned, func() error { return owned.addHandler(h) })
}

// Watches makes controller c reconcile the keys that fn returns for each
// object of src that changes. For an update, fn is called with the old and
// the new object and the union is queued. fn runs on the cache's goroutine:
// it must be fast and must not block; it may read other caches. T and O are
// inferred:
//
//	err := ctrl.Watches(c, nodes, func(n *corev1.Node) []ctrl.Key { ... })
//
// It returns an error if fn is nil or the manager has started.
func Watches[O, T Object](c *Controller[T], src *Cache[O], fn func(O) []Key) error {
	if fn == nil || src == nil {
		return fmt.Errorf("ctrl: %s: Watches: nil cache or function", c)
	}
	if src.mgr != c.mgr {
		return fmt.Errorf("ctrl: %s: Watches: %s belongs to another manager", c, src)
	}
	h := &mapHandler[O]{enqueue: c.enqueue, fn: fn, log: c.log}
	return c.watch("Watches", src, func() error { return src.addHandler(h) })
}

// watch registers a handler on src and makes the controller wait for src
// to sync before it starts.
func (c *Controller[T]) watch(what string, src runner, register func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("ctrl: %s: %s: %w", c, what, ErrStarted)
	}
	if err := register(); err != nil {
		return fmt.Errorf("ctrl: %s: %s: %w", c, what, err)
	}
	if !slices.Contains(c.watched, src) {
		c.watched = append(c.watched, src)
	}
	return nil
}

// enqueue adds a key to the queue. Handlers call it only once the manager
// has started, which creates the queue.
func (c *Controller[T]) enqueue(k Key) {
	c.q.Add(k)
	c.mgr.activity.Add(1)
}

// The controller is the handler of its own cache.

func (c *Controller[T]) add(obj T) { c.enqueue(KeyOf(obj)) }

// addListed queues the objects a list added, through the backlog.
func (c *Controller[T]) addListed(objs []T) {
	keys := make([]Key, len(objs))
	for i, obj := range objs {
		keys[i] = KeyOf(obj)
	}
	c.q.addBacklog(keys)
	c.mgr.activity.Add(1)
}

func (c *Controller[T]) update(old, obj T) {
	if c.passes(old, obj) {
		c.enqueue(KeyOf(obj))
	}
}

func (c *Controller[T]) passes(old, obj T) (pass bool) {
	if len(c.updatePass) == 0 || obj.GetDeletionTimestamp() != nil {
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			c.log.Error(fmt.Errorf("panic: %v", r), "update filter panicked; reconciling the update", "key", KeyOf(obj), "stack", string(debug.Stack()))
			pass = true
		}
	}()
	for _, f := range c.updatePass {
		if f(old, obj) {
			return true
		}
	}
	return false
}

func (c *Controller[T]) delete(obj T) {
	key := KeyOf(obj)
	if c.onDelete != nil {
		c.mu.Lock()
		c.tombstones[key] = obj
		c.mu.Unlock()
	}
	c.enqueue(key)
}

func (c *Controller[T]) resync(obj T) { c.enqueue(KeyOf(obj)) }

// ownerHandler queues the controlling owner of each changed object.
type ownerHandler[O Object] struct {
	enqueue     func(Key)
	group, kind string
	namespaced  bool
}

func (h *ownerHandler[O]) owner(obj O) (Key, bool) {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller == nil || !*ref.Controller || ref.Kind != h.kind {
			continue
		}
		if gv, err := schemaGroup(ref.APIVersion); err != nil || gv != h.group {
			continue
		}
		k := Key{Name: ref.Name}
		if h.namespaced {
			k.Namespace = obj.GetNamespace()
		}
		return k, true
	}
	return Key{}, false
}

func (h *ownerHandler[O]) queueOwner(obj O) {
	if k, ok := h.owner(obj); ok {
		h.enqueue(k)
	}
}

func (h *ownerHandler[O]) add(obj O)    { h.queueOwner(obj) }
func (h *ownerHandler[O]) delete(obj O) { h.queueOwner(obj) }
func (h *ownerHandler[O]) resync(obj O) { h.queueOwner(obj) }
func (h *ownerHandler[O]) update(old, obj O) {
	h.queueOwner(obj)
	if k, ok := h.owner(old); ok {
		if k2, ok2 := h.owner(obj); !ok2 || k2 != k {
			h.enqueue(k)
		}
	}
}

// mapHandler queues the keys a user function maps each changed object to.
type mapHandler[O Object] struct {
	enqueue func(Key)
	fn      func(O) []Key
	log     logr.Logger
}

func (h *mapHandler[O]) queueMapped(obj O) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error(fmt.Errorf("panic: %v", r), "Watches mapping function panicked; the change maps to no key",
				"object", KeyOf(obj), "stack", string(debug.Stack()))
		}
	}()
	for _, k := range h.fn(obj) {
		h.enqueue(k)
	}
}

func (h *mapHandler[O]) add(obj O)    { h.queueMapped(obj) }
func (h *mapHandler[O]) delete(obj O) { h.queueMapped(obj) }
func (h *mapHandler[O]) resync(obj O) { h.queueMapped(obj) }
func (h *mapHandler[O]) update(old, obj O) {
	h.queueMapped(old)
	h.queueMapped(obj) // keys queued twice are reconciled once
}

// The rest implements worker, the manager's view of a controller.

func (c *Controller[T]) name() string { return c.ctrlName }

func (c *Controller[T]) caches() []runner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watched
}

// prepare freezes the wiring and creates the queue, before the caches start.
func (c *Controller[T]) prepare() {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	c.q = newQueue(c.ctrlName, c.opts.RateLimiter, c.mgr.metrics.Queue(), &c.mgr.activity)
}

func (c *Controller[T]) start(reconcileCtx context.Context) {
	for range c.opts.Workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				key, shutdown := c.q.get()
				if shutdown {
					return
				}
				if c.stopping.Load() {
					c.q.Done(key)
					continue // drain without reconciling
				}
				c.process(reconcileCtx, key)
				c.q.Done(key)
			}
		}()
	}
}

func (c *Controller[T]) shutdown(timeout time.Duration) error {
	c.stopping.Store(true)
	c.q.ShutDown()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("ctrl: %s: %d reconciles still running after the shutdown timeout", c, c.q.processing.Load())
	}
}

// process reconciles one key and decides when it comes back.
func (c *Controller[T]) process(ctx context.Context, key Key) {
	// The queue counts keys in processing, for the idle check and the
	// shutdown report; the gauge is for the metrics.
	c.metrics.Active.Inc()
	start := time.Now()
	defer func() {
		c.metrics.Time.Observe(time.Since(start).Seconds())
		c.metrics.Active.Dec()
	}()

	log := c.log
	if log.GetSink() != nil { // a discarding logger needs no values, and no ID
		log = log.WithValues("namespace", key.Namespace, "name", key.Name, "reconcileID", reconcileID())
	}
	ctx = logr.NewContext(ctx, log)
	res, err := c.safely(ctx, log, key)
	switch {
	case err != nil:
		c.metrics.Errored.Inc()
		c.metrics.Errors.Inc()
		if res.RequeueAfter > 0 {
			log.V(1).Info("reconcile returned both a result and an error: the result is ignored")
		}
		var terminal *terminalError
		if errors.As(err, &terminal) {
			c.metrics.Terminal.Inc()
			c.q.forget(key)
			log.Error(err, "reconcile failed; not retrying")
			return
		}
		c.q.addRateLimited(key)
		if apierrors.IsConflict(err) {
			// Routine: the object changed since the cache saw it. The retry
			// reads the newer state.
			log.V(1).Info("reconcile hit a conflict; retrying", "err", err.Error())
			return
		}
		if unreachable(err) {
			c.summarizeOutage(err)
			return
		}
		log.Error(err, "reconcile failed; retrying with backoff")
	case res.RequeueAfter > 0:
		c.metrics.RequeueAfter.Inc()
		c.q.forget(key)
		c.q.addAfter(key, res.RequeueAfter)
	default:
		c.metrics.Success.Inc()
		c.q.forget(key)
	}
}

// reconcileID returns an ID that tells one reconcile's log lines from
// another's: 64 random bits in hex. A UUID reads crypto/rand, which showed
// in the reconcile path's CPU profile.
func reconcileID() string {
	return strconv.FormatUint(rand.Uint64(), 16)
}

// safely runs the reconcile path for key, turning a panic into an error.
func (c *Controller[T]) safely(ctx context.Context, log logr.Logger, key Key) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.metrics.Panics.Inc()
			err = fmt.Errorf("panic: %v [recovered]", r)
			log.Error(err, "reconcile panicked", "stack", string(debug.Stack()))
		}
	}()
	return c.reconcileKey(ctx, key)
}

func (c *Controller[T]) reconcileKey(ctx context.Context, key Key) (Result, error) {
	cached, ok := c.cache.Get(key)
	if c.onDelete != nil {
		c.mu.Lock()
		gone, had := c.tombstones[key]
		delete(c.tombstones, key)
		c.mu.Unlock()
		if had && (!ok || gone.GetUID() != cached.GetUID()) {
			if err := c.onDelete(ctx, gone.DeepCopyObject().(T)); err != nil {
				c.mu.Lock()
				if _, newer := c.tombstones[key]; !newer {
					c.tombstones[key] = gone
				}
				c.mu.Unlock()
				return Result{}, fmt.Errorf("OnDelete: %w", err)
			}
		}
	}
	if !ok {
		return Result{}, nil
	}
	obj := cached
	if !c.opts.UnsafeDisableDeepCopy {
		obj = cached.DeepCopyObject().(T)
	}
	if c.finalizer != "" {
		done, err := c.finalizeStep(ctx, &obj)
		if done || err != nil {
			return Result{}, err
		}
	}
	return c.reconcile(ctx, obj)
}

// finalizeStep adds the controller's finalizer to a live object, or runs the
// finalize hook and removes the finalizer from one being deleted. done
// reports that reconcile is not to be called; after adding the finalizer,
// reconcile goes on with the patched object, which *obj is set to.
func (c *Controller[T]) finalizeStep(ctx context.Context, obj *T) (done bool, err error) {
	o := *obj
	has := slices.Contains(o.GetFinalizers(), c.finalizer)
	switch {
	case o.GetDeletionTimestamp() == nil && has:
		return false, nil
	case o.GetDeletionTimestamp() == nil:
		patched, err := c.patchFinalizers(ctx, o, append(slices.Clone(o.GetFinalizers()), c.finalizer))
		if err != nil {
			return true, err
		}
		*obj = patched
		return false, nil
	case !has:
		return true, nil // being deleted, and not waiting for us
	}
	if err := c.finalize(ctx, o); err != nil {
		return true, fmt.Errorf("finalize: %w", err)
	}
	_, err = c.patchFinalizers(ctx, o, slices.DeleteFunc(slices.Clone(o.GetFinalizers()), func(f string) bool { return f == c.finalizer }))
	return true, IgnoreNotFound(err)
}

// patchFinalizers replaces the object's finalizers with a merge patch that
// carries its resourceVersion, so a concurrent change makes it fail with a
// conflict instead of dropping another controller's finalizer.
func (c *Controller[T]) patchFinalizers(ctx context.Context, obj T, finalizers []string) (T, error) {
	patch, err := jsonMarshal(map[string]any{"metadata": map[string]any{
		"finalizers":      finalizers,
		"resourceVersion": obj.GetResourceVersion(),
	}})
	if err != nil {
		var zero T
		return zero, err
	}
	return c.client.Patch(ctx, KeyOf(obj), types.MergePatchType, patch)
}

// GenerationChanged reports whether metadata.generation changed: the spec
// changed, not only the status or metadata. Use it with
// [Controller.FilterUpdates].
func GenerationChanged[T Object](old, obj T) bool { return old.GetGeneration() != obj.GetGeneration() }

// LabelsChanged reports whether the labels changed. Use it with
// [Controller.FilterUpdates].
func LabelsChanged[T Object](old, obj T) bool {
	return !mapsEqual(old.GetLabels(), obj.GetLabels())
}

// AnnotationsChanged reports whether the annotations changed. Use it with
// [Controller.FilterUpdates].
func AnnotationsChanged[T Object](old, obj T) bool {
	return !mapsEqual(old.GetAnnotations(), obj.GetAnnotations())
}

// SetControllerReference makes owner the controller of obj: it adds an
// ownerReference with controller=true and blockOwnerDeletion=true, so that
// [Owns] maps changes of obj to owner and the garbage collector deletes obj
// with owner. It returns an error if obj already has another controller, if
// owner is namespaced and obj is in another namespace or cluster-scoped, or
// if O is not a known resource.
func SetControllerReference[O Object](owner O, obj metav1.Object) error {
	info, err := binding.Lookup[O]()
	if err != nil {
		return fmt.Errorf("ctrl: SetControllerReference: %w", err)
	}
	if info.Namespaced && owner.GetNamespace() != obj.GetNamespace() {
		return fmt.Errorf("ctrl: SetControllerReference: %s %s cannot own %s in namespace %q", info.Kind, KeyOf(owner), obj.GetName(), obj.GetNamespace())
	}
	gvk := info.GVK()
	ref := metav1.OwnerReference{
		APIVersion:         gvk.GroupVersion().String(),
		Kind:               gvk.Kind,
		Name:               owner.GetName(),
		UID:                owner.GetUID(),
		Controller:         new(true),
		BlockOwnerDeletion: new(true),
	}
	refs := obj.GetOwnerReferences()
	for i, r := range refs {
		if r.Controller == nil || !*r.Controller {
			continue
		}
		if g, _ := schemaGroup(r.APIVersion); g != gvk.Group || r.Kind != gvk.Kind || r.Name != ref.Name {
			return fmt.Errorf("ctrl: SetControllerReference: %s is already controlled by %s %s", obj.GetName(), r.Kind, r.Name)
		}
		refs[i] = ref
		obj.SetOwnerReferences(refs)
		return nil
	}
	obj.SetOwnerReferences(append(refs, ref))
	return nil
}
