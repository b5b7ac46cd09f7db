// Package ctrl builds Kubernetes controllers over your own Go types.
//
// A controller watches objects of one type T, such as *appsv1.Deployment or
// a custom resource struct, and calls a reconcile function with the latest
// state of each object that changed:
//
//	mgr, err := ctrl.NewManager(ctrl.Options{Config: restConfig})
//	c, err := ctrl.NewController(mgr, "configmap-hasher",
//		func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
//			// cm is this call's own copy of the cached object.
//			return ctrl.Result{}, nil
//		}, ctrl.ControllerOptions{Workers: 4})
//	_, err = ctrl.Owns[*corev1.Secret](c) // reconcile the owner when a Secret it controls changes
//	err = mgr.Start(ctx)               // blocks until ctx is done
//
// The type parameter is the registration: there is no Scheme. A custom
// resource type is registered once with [Register]. Tests run the same
// code against client-go's fakes (Options.FakeClientset,
// ctrltest.NewFakeDynamic) and wait with [Manager.WaitIdle].
//
// # Parts
//
//   - [Manager] runs caches and controllers, and owns the metrics, leader
//     election and the HTTP endpoints.
//   - [Cache] is a typed, indexed view of one type, fed by one shared watch.
//   - [Client] reads from the cache and writes to the API server, typed.
//   - [Controller] queues keys on changes and reconciles them with workers.
//   - [Validate], [Default] and [Convert] register admission and conversion
//     webhooks, served by the manager over TLS.
//   - [Machine] declares the phases an object's status moves through;
//     [NewMachine] runs it as a controller.
//
// # Guarantees
//
// Each guarantee is stated here once; other docs link to it. The reasoning
// behind them is in README.md#why-it-works-this-way.
//
//   - Typed: a wiring mistake (an unknown type, an unregistered custom
//     resource, a scope or status subresource that discovery contradicts)
//     is an error when wiring, naming the Go type.
//   - Stingy: a key is never reconciled by two workers at once, and a key
//     queued many times while waiting is reconciled once, with every cause
//     ([CausesFrom]).
//   - Live first: the keys of a list (initial, relist, takeover, resync)
//     enter the queue a window at a time as workers take them, so a change
//     that arrives meanwhile is reconciled before the rest of the list.
//   - Fresh: reconcile gets its own deep copy of the latest cached object.
//     The cache may lag the server; a conflict on write means: return the
//     error and be called again with newer state. A NotFound on a write to
//     the reconciled object itself, once the server confirms it is gone,
//     ends the reconcile quietly, without a retry.
//   - Persistent: an error or a panic requeues the key with backoff; the
//     manager stops only when its context is done.
//   - One leader: with leader election, a replica leads until a deadline on
//     its own monotonic clock, RenewDeadline after its last successful
//     renewal began, which passes before any other replica may take over.
//     Past it, even if paused (SIGSTOP, a frozen VM), it takes no key, its
//     reconciles are canceled, and its writes through ctrl's clients fail
//     with [ErrLeadershipLost]. A replica that does not lead keeps its
//     caches warm and queues nothing; on takeover it reconciles every
//     cached object once.
//   - One owner per object: with [Sharding], a replica reconciles an object
//     (and runs its OnDelete and OnFinalize) only while it serves the
//     object's part of the hash space, taken only after a quorum read finds
//     no live replica claiming it and given up only once no reconcile of it
//     runs. A move is neither a deletion nor a selector exit: no hook runs,
//     the finalizer stays, and the next owner reconciles the object whatever
//     its update filters. A replica whose membership ended is fenced as a
//     lost leader is. No orphans: the share of a replica that stopped
//     cleanly is taken at once, of one that died LeaseDuration after its
//     last renewal began. A joining replica takes its share as others give
//     it up, disturbing no other objects.
//   - Observable: deletions reach [Controller.OnFinalize] hooks while the
//     object still exists, across restarts and failovers, and
//     [Controller.OnDelete] hooks once after it is gone, for deletions seen
//     while leading. An object that only leaves a cache's selector is not
//     deleted: OnDelete does not see it, and its finalizer is still run. An
//     object a cache only stops reaching (namespace no longer watched,
//     member cluster gone, CRD no longer serving the version) is forgotten:
//     no hook runs.
//   - Resilient: while the API server is away, caches retry at least every
//     1.5 s (or after Retry-After), saying so in one log line and once more
//     when back, then spread their relists over two seconds. A silently dead
//     connection is noticed within twice Options.ConnectionCheck. A watch
//     compacted away (410 Gone) relists, turning missed changes and
//     deletions into events. Reconciles that failed because the manager's
//     requests got no answer wait for that server, not the retry budget, are
//     retried within two seconds of its return, and are summarized in the
//     log. Any other error is retried with backoff.
//   - Answered: every webhook request gets an answer. An unreadable review
//     gets 400 and a message; a webhook function's error, panic, or overrun
//     of the request's timeout denies the request with a status the API
//     server shows the user; the server never crashes.
//   - Once: a state machine's move is written once or not at all, from the
//     state its step saw (the write carries that resourceVersion), and is
//     followed by its Event; a deleted object's finalizer stays until the
//     machine's cleanup path has ended.
//   - Bounded: a cache decodes only what it keeps: managedFields only when
//     kept, and of a projection that names its fields ([Project]) only
//     those. In a container with a memory limit the collector paces itself
//     by four fifths of that limit ([Options.MemoryLimit]), not by twice
//     the heap.
//   - Told: a list or watch the server forbids is reported at once, in one
//     log line and in /readyz, naming the RBAC rule to add; it holds up only
//     the controllers that use that cache. [Manager.RBACRules] lists the
//     rules the manager's own work needs.
//   - Testable: the fakes hold a deletion while finalizers remain, as the
//     API server does, so finalizers run in unit tests; [Manager.WaitIdle]
//     returns once everything is reconciled, or names each failing key
//     with its last error.
//   - Optional: a kind declared optional (CacheOptions.Optional) may be
//     missing: the manager runs without it; its cache lists once its CRD is
//     Established, empties when it is deleted (deletions seen first), and
//     waits for it again, saying so once, without a restart.
//   - Rewirable: while the manager runs, controllers stop
//     ([Controller.Stop]), [Owns] and [Watches] come and go ([Unwatch]),
//     and caches change namespaces ([Cache.SetNamespaces]); a cache nothing
//     uses any more stops and lets its objects go.
//   - Compatible: metrics carry controller-runtime's names and labels; the
//     ctrl_cache_* metrics add watch state, relists and blind time.
//   - Guarded: metrics are served over HTTPS only to clients whose token
//     the API server authenticates and whose user may get the path, unless
//     plain HTTP is chosen; the HTTPS servers speak HTTP/2 only when asked;
//     a manager with webhooks starts only if something serves them.
//
// # Reading objects
//
// [Cache] reads return shared objects, never to be modified; [Client]
// reads return copies, wait for the sync, and fail with errors naming type
// and key (apierrors.IsNotFound for a missing object). Both carry
// apiVersion and kind ([ReferenceOf]).
package ctrl
