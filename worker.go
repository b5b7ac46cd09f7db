package ctrl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/probe"
	"github.com/typedctrl/ctrl/internal/shared"
	"github.com/typedctrl/ctrl/internal/watcher"
)

func (c *Controller[T]) work() {
	for {
		key, item, shutdown := c.q.Get()
		if shutdown {
			return
		}
		c.serve(key, item, watcher.Yield{})
	}
}

// serve takes care of a key the queue handed out, to a worker or to a
// watch's reader (listwatch.go; y yields the reader's goroutine), and gives it
// back.
func (c *Controller[T]) serve(key Key, item queued, y watcher.Yield) {
	ctx := *c.reconcileCtx.Load()
	switch {
	case c.stopping.Load() || item.Causes.Total == 0:
		// Drain; a key without causes was served by the reconcile that took them.
	case leader.Check(ctx) != nil:
		// Leadership ended: whoever leads next reconciles every object.
		c.q.Forget(key)
	case c.awaitOwnWrite(key, item.Causes):
		// The update bringing this program's write queues the key again.
	default:
		c.process(ctx, key, item, y)
	}
	c.q.Done(key)
	c.q.Recycle(item.Causes) // nothing kept it: process copied it into the reconcile's context
}

// process reconciles one key; the whole fate of a key is in its switch.
func (c *Controller[T]) process(ctx context.Context, key Key, item queued, y watcher.Yield) {
	ctx, leave, ok := c.admit(ctx, key)
	if !ok {
		c.q.Forget(key) // another replica's: it reconciles the object
		return
	}
	defer leave()
	c.metrics.Active.Inc()
	start := time.Now()
	defer func() {
		c.metrics.Time.Observe(time.Since(start).Seconds())
		c.metrics.Active.Dec()
	}()
	c.countCauses(item.Causes)
	if !item.Released.IsZero() {
		c.metrics.WaitAfterRecovery.Observe(start.Sub(item.Released).Seconds())
	}

	log := c.log
	if log.GetSink() != nil { // a discarding logger needs no values, and no ID
		log = log.WithValues("namespace", key.Namespace, "name", key.Name, "reconcileID", reconcileID(), "causes", item.Causes.String())
		if key.Cluster != "" {
			log = log.WithValues("cluster", key.Cluster)
		}
	}
	if key.Cluster != "" {
		// A member's reconciles end when it leaves the fleet.
		mb := c.mgr.memberOf(key.Cluster)
		if mb == nil {
			c.q.Forget(key)
			c.failures.Done(key)
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(mb.ctx, cancel)()
	}
	if d := c.opts.ReconcileTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errReconcileTimeout)
		defer cancel()
	}
	ri := &reconcileInfo{Context: ctx, log: log, key: key, causes: *item.Causes, identity: c.mgr.Identity(), yield: y}
	ctx = ri
	res, err := c.safely(ctx, log, key)
	held := time.Since(start)
	if at := ri.requested.Load(); at != 0 {
		held = min(held, time.Duration(at-start.UnixNano()))
	}
	c.pace.Observe(held)
	if c.opts.ReconcileTimeout > 0 && context.Cause(ctx) == errReconcileTimeout {
		c.metrics.Timeouts.Inc()
		if err == nil {
			log.Info("reconcile ran past ReconcileTimeout", "timeout", c.opts.ReconcileTimeout.String())
		}
	}
	switch {
	case err != nil && (errors.Is(err, ErrLeadershipLost) || leader.Check(ctx) != nil):
		// Not to retry: whoever leads next reconciles every object.
		c.q.Forget(key)
		c.failures.Done(key)
		log.V(1).Info("leadership lost: the reconcile ends here", "err", err.Error())
	case err != nil && errors.Is(context.Cause(ctx), act.ErrMoved):
		// Not the object's failure either: it is another replica's now.
		c.q.Forget(key)
		log.V(1).Info("the object moved to another replica: the reconcile ends here", "err", err.Error())
	case err != nil && c.vanished(ctx, key, ri, err):
		// Deleted while reconciled: its deletion is its own event.
		c.metrics.Success.Inc()
		c.q.Forget(key)
		c.failures.Done(key)
		log.V(1).Info("the object was deleted during its reconcile; not retrying", "err", err.Error())
	case err != nil:
		c.metrics.Errored.Inc()
		c.metrics.Errors.Inc()
		if res.RequeueAfter > 0 {
			log.V(1).Info("reconcile returned both a result and an error: the result is ignored")
		}
		cluster, down := probe.Unreachable(err)
		switch {
		case isTerminal(err):
			c.metrics.Terminal.Inc()
			c.q.Forget(key)
			c.failures.Done(key)
			log.Error(err, "reconcile failed; not retrying")
		case apierrors.IsConflict(err):
			// Routine: the retry reads newer state, outside the shared budget.
			c.failures.Failed(key, err)
			c.q.RetryConflict(key)
			log.V(1).Info("reconcile hit a conflict; retrying", "err", err.Error())
		case down:
			// The key waits for the server, outside backoff and budget.
			c.failures.Failed(key, err)
			c.waitForServer(key, cluster, err)
		default:
			c.failures.Failed(key, err)
			c.q.Retry(key)
			log.Error(err, "reconcile failed; retrying with backoff")
		}
	case res.RequeueAfter > 0:
		c.metrics.RequeueAfter.Inc()
		c.q.Forget(key)
		c.failures.Done(key)
		c.q.AddAfter(key, jitter(res.RequeueAfter, c.opts.RequeueJitter), Cause{Trigger: TriggerRequeue})
	default:
		c.metrics.Success.Inc()
		c.q.Forget(key)
		c.failures.Done(key)
	}
}

// errReconcileTimeout is the cause of a ReconcileTimeout cancellation.
var errReconcileTimeout = errors.New("ctrl: the reconcile ran past ControllerOptions.ReconcileTimeout")

func jitter(d time.Duration, fraction float64) time.Duration {
	if fraction <= 0 {
		return d
	}
	return d + rand.N(time.Duration(float64(d)*fraction)+1)
}

// countCauses counts the reconcile once under each reason of its causes.
func (c *Controller[T]) countCauses(cs *Causes) {
	for i := range reasons {
		if cs.reasons&(1<<i) != 0 {
			c.metrics.Causes[i].Inc()
		}
	}
}

// reconcileID returns 64 random bits in hex: a UUID reads crypto/rand,
// which showed in the reconcile path's CPU profile.
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
	return c.reconcileCached(ctx, key)
}

// reconcileCached runs a removed object's hooks, then reconciles the cached one.
func (c *Controller[T]) reconcileCached(ctx context.Context, key Key) (Result, error) {
	cached, ok := c.cache.Get(key)
	cached, ok, err := c.cache.repair(ctx, key, cached, ok)
	if err != nil {
		return Result{}, err
	}
	if c.afterRead != nil && ok {
		c.afterRead(key, cached)
	}
	if c.tombstones != nil {
		if err := c.bury(ctx, key, cached, ok); err != nil {
			return Result{}, err
		}
	}
	if !ok {
		return Result{}, nil
	}
	if ri, ok := ctx.Value(requestKey{}).(*reconcileInfo); ok {
		ri.reconciled, ri.uid = true, cached.GetUID()
	}
	var res Result
	err = c.lend(key, cached, func(obj T) (err error) {
		if c.finalizer != "" {
			if done, err := c.finalizeStep(ctx, cached, &obj); done || err != nil {
				return err
			}
		}
		res, err = c.reconcile(ctx, obj)
		return err
	})
	return res, err
}

// lend calls use with key's cached object, or a copy of its own if the
// controller copies or the use is checked (Shared): a checked use that
// changes its copy is reported, and an unchecked one that fails (an error,
// a panic) leaves the cached object suspect (Cache.suspect).
func (c *Controller[T]) lend(key Key, cached T, use func(T) error) (err error) {
	if c.copying.Load() {
		return use(cached.DeepCopyObject().(T))
	}
	if !c.checks.Next() {
		failed := true
		defer func() {
			if failed {
				c.cache.suspect(key, cached)
			}
		}()
		err = use(cached)
		failed = err != nil
		return err
	}
	// The use gets a copy, compared with another: the cache's object is
	// not touched, and a change another reconcile of the key makes to it
	// meanwhile is not taken for this one's.
	before, obj := cached.DeepCopyObject().(T), cached.DeepCopyObject().(T)
	err = use(obj)
	path := shared.Diff(before, obj)
	if path == "" {
		return err
	}
	c.metrics.SharedChanges.Inc()
	changed := fmt.Errorf("ctrl: controller %q changed the cached %s %s it was handed, shared, at %s: change a copy "+
		"(DeepCopy, then PatchFrom; or CreateOrPatch), or set ControllerOptions.CopyObject", c.ctrlName, c.cache.b.Type, key, path)
	if c.checks.Every == 1 && c.misused.CompareAndSwap(nil, &changed) {
		c.log.Error(changed, "WaitIdle reports the change", "object", key)
	}
	if c.checks.Every != 1 && c.copying.CompareAndSwap(false, true) {
		c.log.Error(changed, "this controller's reconciles get copies from now on", "object", key)
	}
	return err
}

// vanished reports whether err is a NotFound from writing the reconciled
// object and the server, asked again, no longer holds it (or holds a new
// one): a NotFound also comes for a subresource the resource lacks, a
// mistake to report.
func (c *Controller[T]) vanished(ctx context.Context, key Key, ri *reconcileInfo, err error) bool {
	var re *requestError
	if !ri.reconciled || !errors.As(err, &re) || !re.written() || re.key != key ||
		re.resource != c.cache.b.GVR.GroupResource() || !apierrors.IsNotFound(re.err) {
		return false
	}
	b, berr := c.client.backend(key.Cluster)
	if berr != nil || b == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	obj, gerr := b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return true
	case gerr != nil:
		return false
	}
	return ri.uid != "" && obj.GetUID() != "" && obj.GetUID() != ri.uid
}

// admit asks the controller's share, if any, whether this replica
// reconciles key now, judging the cached object or its tombstone. It
// returns the reconcile's context, canceled if the object moves away, and
// the function to call when the reconcile ends. An unheld key passes.
func (c *Controller[T]) admit(ctx context.Context, key Key) (context.Context, func(), bool) {
	share := c.cache.share
	if share == nil {
		return ctx, func() {}, true
	}
	obj, ok := c.cache.Get(key)
	if !ok && c.tombstones != nil {
		c.mu.Lock()
		ts, had := c.tombstones[key]
		c.mu.Unlock()
		obj, ok = ts.obj, had
	}
	if !ok {
		return ctx, func() {}, true
	}
	if ctx, leave, ok := share.Admit(ctx, obj); ok {
		return ctx, leave, true
	}
	if c.tombstones != nil {
		c.mu.Lock()
		delete(c.tombstones, key)
		c.mu.Unlock()
	}
	return nil, nil, false
}
