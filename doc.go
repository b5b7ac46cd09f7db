// Package ctrl builds Kubernetes controllers over your own Go types.
//
// A controller watches objects of one type T, such as *appsv1.Deployment or
// a custom resource struct, and calls a reconcile function with the latest
// state of each object that changed:
//
//	mgr, err := ctrl.NewManager(ctrl.Options{Config: restConfig})
//	c, err := ctrl.NewController(mgr, "configmap-hasher",
//		func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
//			// cm is the cache's object, shared: change a copy (cm.DeepCopy()).
//			return ctrl.Result{}, nil
//		}, ctrl.ControllerOptions{Workers: 4})
//	_, err = ctrl.Owns[*corev1.Secret](c) // reconcile the owner when a Secret it controls changes
//	err = mgr.Start(ctx)               // blocks until ctx is done
//
// The type parameter is the registration, with no Scheme; custom resources
// are registered once ([Register]). Tests use client-go's fakes
// (Options.FakeClientset, FakeDynamic) and [Manager.WaitIdle].
//
// # Parts
//
//   - [Manager] runs caches and controllers, and owns the metrics, leader
//     election and the HTTP endpoints.
//   - [Cache] is a typed, indexed view of one type, fed by one shared watch.
//   - [Client] reads from the cache and writes to the API server, typed.
//   - [Controller] queues keys on changes and reconciles them with workers.
//   - [Validate], [Mutate] and [Convert] register admission and conversion
//     webhooks, served by the manager over TLS.
//   - [Machine] declares the phases an object's status moves through;
//     [NewMachine] runs it as a controller.
//
// # Guarantees
//
// Each guarantee is stated here once; other docs link to it. The reasoning
// is in docs/why.md.
//
//   - Typed: a wiring mistake (unknown type, unregistered custom resource,
//     a scope or status subresource its CRD or discovery contradicts) is an
//     error when wiring, naming the Go type. Wiring asks the API server
//     only about custom resources registered with neither CRD nor scope.
//   - Stingy: a key is never reconciled twice at once, nor more than
//     ControllerOptions.Workers keys at once (an idle controller's
//     reconcile on the goroutine that read its event counts as one); a key
//     queued many times while waiting is reconciled once, with every cause
//     ([RequestFrom]).
//   - Unhindered: a cache's watch reads on while its controllers
//     reconcile; a reconcile run on the goroutine that read its event (an
//     idle controller's, while its reconciles end or send a request within
//     1 ms) holds the reading for 40 ms at most (as the runtime's timers
//     fire), and only until it sends a request through the manager's
//     clients.
//   - Live first: a list's keys (initial, relist, takeover, resync) enter
//     the queue a window at a time, so changes meanwhile go first.
//   - Fresh: reconcile gets the latest cached object, the cache's own
//     (a copy with ControllerOptions.CopyObject, or when checked: Shared),
//     never older than this program's own writes to it through ctrl's
//     clients (a key waits until the cache shows them). The cache may lag
//     other writers: on a conflict, return the error to be called again
//     with newer state. A NotFound on writing the reconciled
//     object itself, once the server confirms it gone, ends the reconcile
//     quietly, without a retry.
//   - Persistent: an error or a panic requeues the key with backoff; the
//     manager stops only when its context is done.
//   - One leader: with leader election, a replica leads until a deadline on
//     its own monotonic clock, RenewDeadline after its last successful
//     renewal began, which passes before any other may take over (others
//     wait LeaseDuration; the difference, 5 s by default, is the margin
//     for a write sent just before the deadline), or at once when a
//     renewal finds another holder. Past it,
//     even if paused (SIGSTOP, a frozen VM), it takes no key, its
//     reconciles are canceled, and its writes through ctrl's clients fail
//     with [ErrLeadershipLost], which ends the reconcile without a retry or
//     a failure counted. A patch, apply or delete that leaves after all
//     (paused between its last check and the wire) carries the object's
//     resourceVersion as this replica knew it, so the API server refuses
//     it once another replica wrote the object. A create carries none: its
//     fence is the check alone, and a named object's second create fails
//     with AlreadyExists ([Client.Create]). A replica that does not
//     lead keeps its caches warm and queues nothing; on takeover it
//     reconciles every cached object once.
//   - One owner per object: with [Sharding], a replica reconciles an object
//     (and runs its OnDelete and OnFinalize) only while it serves the
//     object's part of the hash space, taken only after a quorum read finds
//     no live replica claiming it, given up only once none of its
//     reconciles runs; the part is that of its UID (or namespace), never
//     that of its shard label in label mode, which a replica puts back if
//     someone changes it. A move is no deletion nor selector exit: no hook
//     runs, the finalizer stays, and the next owner reconciles the object
//     whatever its update filters. An ended membership is fenced as a lost
//     leader is. The share of a replica that stopped is taken at once, of
//     one that died LeaseDuration after its last renewal began; a joining
//     replica takes objects only from the others, and no object moves
//     between replicas that stay.
//   - Observable: deletions reach [Controller.OnFinalize] while the object
//     exists, across restarts and failovers, and [Controller.OnDelete] once
//     after it is gone, if seen while leading. An object that only leaves a
//     selector is not deleted: no OnDelete, and its finalizer still runs.
//     One a cache only stops reaching (namespace unwatched, member gone,
//     version no longer served) is forgotten: no hook runs.
//   - Resilient: while the API server is away, caches retry at least every
//     1.5 s (or after Retry-After), log once when it goes and once when it
//     is back, then spread relists over two seconds. A silently dead
//     connection is noticed within Options.ConnectionCheck. A 410
//     Gone relists, turning missed changes into events. Reconciles that
//     failed for lack of an answer from the server wait for it, outside the
//     retry budget, are retried within two seconds of its return, and are
//     summarized in the log. Other errors are retried with backoff.
//   - Answered: every webhook request gets an answer: 400 for an
//     unreadable review; a denial the API server shows the user for a
//     webhook function's error, panic, or timeout overrun; no crash.
//     Objects are decoded as the API server decodes them: field names
//     case-sensitive, the last of a repeated field winning.
//   - Once: a state machine's move is written once or not at all, from the
//     state its step saw (the write carries its resourceVersion), then its
//     Event; a deleted object's finalizer stays until the cleanup path
//     ended.
//   - Bounded: a cache decodes only what it keeps (managedFields only when
//     kept; a [Project] projection's named fields only). In a container
//     with a memory limit the collector paces by four fifths of it
//     ([Options.MemoryLimit]), not by twice the heap.
//   - Told: a list or watch the server forbids is reported at once, in a
//     log line and /readyz, naming the RBAC rule to add, and holds up only
//     the controllers using that cache; any other request it forbids is
//     too, in /readyz until allowed (or unasked for 10 minutes), without
//     failing it. [Manager.RBACRules] lists the manager's needs. A watch event of another type than the cache's
//     ends its watch with an error naming both types, which
//     [Cache.SetWatchErrorHandler] gets, and the cache relists.
//   - Shared: a checked reconcile (its finalize and OnDelete too) gets a
//     copy, compared with another after it: in a test binary every one is,
//     a change to any cached object by any reader is caught at the object's
//     next event or an idle WaitIdle, and WaitIdle then fails naming the
//     key and field path (and a reconcile's controller); elsewhere a
//     controller's first 100 reconciles and one in 64 later are, a change
//     is logged once and counted
//     (ctrl_reconcile_shared_object_changes_total), and the controller
//     copies from then on. A change made in place by an unchecked
//     reconcile never outlives its failure, nor a failed write of the
//     object: the key's next reconcile reads the server's object.
//   - Testable: the fakes hold deletions while finalizers remain, so
//     finalizers run in unit tests, and keep metadata.generation as the API
//     server does, so [GenerationChanged] filters as in production;
//     [Manager.WaitIdle] returns once all is reconciled, or names each
//     failing key with its last error, however the wait ends.
//   - Optional: a kind declared optional (CacheOptions.Optional) may be
//     missing: the manager runs; the cache lists once its CRD is
//     Established, empties when it is deleted (deletions seen first), and
//     waits again, saying so once, with no restart.
//   - Rewirable: while the manager runs, controllers stop
//     ([Controller.Stop]), [Owns] and [Watches] come and go ([Unwatch]),
//     caches change namespaces ([Cache.SetNamespaces]); an unused cache
//     stops and lets its objects go.
//   - Compatible: metrics carry controller-runtime's names and labels;
//     ctrl_cache_* add watch state, relists and blind time.
//   - Guarded: metrics go over HTTPS only to tokens the API server
//     authenticates and authorizes, unless plain HTTP is chosen; HTTP/2
//     only when asked; webhooks must be served for Start to succeed.
//     Tokens not known to authenticate cost at most 10 TokenReviews a
//     second, 2 for one client address (else 429), so no one client keeps
//     a new scraper out, and never push a known token's answer out;
//     concurrent requests that need one review share it.
//
// # Reading objects
//
// [Cache] reads return shared objects, never to be modified; [Client]
// reads return copies, wait for the sync, and fail with errors naming type
// and key (apierrors.IsNotFound for a missing object). Both carry
// apiVersion and kind ([ReferenceOf]).
package ctrl
