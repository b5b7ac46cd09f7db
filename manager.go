package ctrl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/denied"
	"github.com/typedctrl/ctrl/internal/events"
	"github.com/typedctrl/ctrl/internal/leader"
	"github.com/typedctrl/ctrl/internal/lostcreate"
	"github.com/typedctrl/ctrl/internal/memlimit"
	"github.com/typedctrl/ctrl/internal/metrics"
	"github.com/typedctrl/ctrl/internal/probe"
	"github.com/typedctrl/ctrl/internal/rbac"
	"github.com/typedctrl/ctrl/internal/serve"
	"github.com/typedctrl/ctrl/internal/transport"
)

// Options configure a [Manager]. Set Config to reach an API server, or
// FakeClientset and FakeDynamic to run against client-go's fakes. The zero
// value of every other field means its default.
type Options struct {
	// Config reaches the manager's own cluster (a fleet's hub; where Leases
	// live). A positive QPS (with Burst) limits all the manager's requests;
	// zero: no client-side limit (docs/why.md#no-client-side-rate-limit). A
	// manager with only fleet caches may leave it and the fakes unset, and
	// then cannot elect or shard.
	Config *rest.Config
	// FakeClientset serves built-in types in tests, before Config: pass
	// fake.NewClientset(objects...); a cache over it syncs once its watch is
	// open. It and FakeDynamic behave as the package's guarantees (Testable)
	// say; reactors a test adds with PrependReactor, before NewManager or
	// after, run first.
	FakeClientset FakeClientset
	// FakeDynamic serves custom resources and unstructured objects in tests,
	// before Config: pass ctrltest.NewFakeDynamic(objects...). A cache of a
	// resource whose list kind the fake lacks makes Start fail.
	FakeDynamic dynamic.Interface

	// Namespace restricts caches of namespaced types to one namespace.
	// Default: all namespaces.
	Namespace string
	// Logger receives the manager's logs, and each reconcile's logger
	// derives from it (in tests, ctrltest.Logger(t)). Default: discarded.
	Logger logr.Logger
	// Registerer receives the manager's Prometheus metrics. Default: a new
	// registry, returned by [Manager.Registry].
	Registerer prometheus.Registerer
	// FieldManager names this program in managedFields for its writes.
	// Default: the base name of os.Args[0], or "ctrl" if that is empty.
	FieldManager string
	// SyncTimeout bounds how long Start waits for the caches' first lists.
	// Default: 2 minutes.
	SyncTimeout time.Duration
	// ShutdownTimeout bounds how long Start waits, once its context is done,
	// for running reconciles to return. Default: 30 seconds.
	ShutdownTimeout time.Duration
	// Compression asks the API server to gzip its responses
	// (docs/why.md#compression-off-by-default). Default: off.
	Compression bool
	// ConnectionCheck is how long a connection to the API server may go
	// without answering: ctrl pings a connection silent for a third of it
	// and closes it if the ping takes the rest, retrying its requests on a
	// new one (docs/why.md#connection-checks). Negative: client-go's
	// defaults, every watch shared. Default: 3 seconds.
	ConnectionCheck time.Duration

	// MemoryLimit, in bytes, is set by Start as the Go runtime's soft memory
	// limit, with proportional GC pacing off unless GOGC is set
	// (docs/why.md#memory-limit). GOMEMLIMIT wins; negative leaves the runtime
	// alone. Default: with Options.Config and no fakes, four fifths of the
	// container's smallest cgroup memory limit, if any.
	MemoryLimit int64

	// ClusterProvider finds the member clusters of a fleet ([Provider]);
	// [Manager.Engage] adds them directly. Default: none.
	ClusterProvider Provider

	// Sharding splits every controller's objects among the replicas ([Sharding]),
	// except with ControllerOptions.Unsharded. Default: off.
	Sharding Sharding

	// LeaderElection makes replicas take turns. Default: off.
	LeaderElection LeaderElection

	// MetricsAddress serves Prometheus metrics at /metrics, such as ":8443",
	// by default over HTTPS to tokens whose user may get nonResourceURL
	// /metrics (Guarded; answers cached a minute, five if allowed, 30 s if
	// denied). It needs the default registry or a Registerer that is a
	// Gatherer. Default: off.
	MetricsAddress string
	// MetricsServing says how MetricsAddress serves; see [MetricsServing].
	MetricsServing MetricsServing
	// HealthAddress serves /healthz and /readyz (every cache synced, every
	// required kind served; optional kinds waiting for their CRD and
	// requests the server forbids listed), such as ":8081", over plain
	// HTTP to anyone. Default: off.
	HealthAddress string
	// PprofAddress serves Go's profiles at /debug/pprof/. Default: off.
	PprofAddress string
	// WebhookAddress serves the webhooks ([Validate], [Mutate], [Convert])
	// over TLS as Options.TLS says, such as ":9443", and adds a TLS handshake
	// check to /readyz. Start fails if webhooks are registered and neither
	// this nor [Manager.WebhookHandler] serves them. Connection limits and
	// body size: README.md#admission-and-conversion-webhooks. Default: off.
	WebhookAddress string
	// WebhookCertDir holds the webhook certificate and key as tls.crt and
	// tls.key. Start fails if they cannot be read; a changed pair is served
	// from the next handshake. Default: $TMPDIR/k8s-webhook-server/serving-certs.
	WebhookCertDir string
	// TLS sets the TLS of the webhook and metrics servers; see [TLSOptions].
	TLS TLSOptions
}

// FakeClientset is what ctrl needs of client-go's fake clientsets, such as
// *fake.Clientset: it runs actions through the fake's reactors and tracker.
type FakeClientset interface {
	Invokes(action clienttesting.Action, defaultReturnObj runtime.Object) (runtime.Object, error)
	InvokesWatch(action clienttesting.Action) (watch.Interface, error)
}

// Manager owns the caches, clients and controllers of one program and runs
// them. Create it with [NewManager], wire controllers to it, then call
// [Manager.Start]. All methods are safe for concurrent use.
type Manager struct {
	opts     Options
	clients  binding.Clients
	log      logr.Logger
	metrics  *metrics.Set
	registry *prometheus.Registry // nil if the user supplied a Registerer

	policy      act.Policy    // who acts: everyone, the leader, or each object's shard owner
	identity    string        // of this replica, with leader election or sharding
	leadership  leader.Status // what Leading reports
	probe       probe.Prober
	conns       *transport.Conns // of the HTTP client's transport, if it is the manager's alone
	lostCreates lostcreate.Creates[Key]

	mu          sync.Mutex
	bindings    map[bindingID]any // *binding.Binding[T], of the manager's own cluster
	members     map[string]*member
	fleetCaches []fleetCache
	caches      map[cacheID]managedCache
	cacheList   []managedCache
	controllers map[string]managedController
	ctrlList    []managedController
	started     bool
	running     context.Context // the caches' context while Start runs
	startedCh   chan struct{}   // closed when the caches synced and workers run
	startedOnce sync.Once
	fail        context.CancelCauseFunc // stops Start with a fatal error
	events      events.Sinks
	stopped     chan struct{} // closed when Start returns
	startErr    error
	addresses   Addresses
	wg          sync.WaitGroup // cache and server goroutines
	activity    atomic.Uint64  // bumped by every change the idle check reads
	webhooks    webhooks       // the webhook server, made on first use
	grants      rbac.Grants    // RBAC verbs the manager's own work needs
	refusals    denied.Requests
}

type managedCache interface {
	describe() string
	run(ctx context.Context, log logr.Logger)
	syncedChan() <-chan struct{}
	lastError() error
	busy() string                                // why the cache is not idle, or ""
	notReady() string                            // why it is not ready, or ""
	warning() string                             // what the server refuses it though it is ready, or ""
	forbidden() error                            // why the server refuses it a list or watch, or nil
	groupResource() (schema.GroupResource, bool) // what it lists and watches, and whether in the own cluster
	waitingForCRD() string                       // for /readyz: an optional kind that waits, or ""
	refsOf() *cacheRefs                          // under m.mu
	release()                                    // empties it once it stopped for good
	changes() error                              // the first change to a cached object found, in a test binary
}

type managedController interface {
	name() string
	prepare()                                // freezes wiring, creates the queue
	start(reconcileCtx context.Context)      // activates it and starts its workers
	pause(timeout time.Duration) error       // deactivates it until the next start, waits bounded
	shutdown(timeout time.Duration) error    // stops its workers, waits bounded
	busy(requeueWithin time.Duration) string // why the controller is not idle, or ""
	failing() error                          // its failing keys and their last errors, or nil
	waitingClusters() []string               // whose servers keys wait for
	releaseWaiting(cluster string)           // queues them: the server is back
	forget(cluster string)                   // a member left: drop what is kept of it
}

// NewManager returns a manager for opts. It returns an error if no client
// is configured, the Config is invalid, or leader election's durations
// cannot keep two leaders apart.
func NewManager(opts Options) (*Manager, error) {
	own := opts.Config != nil || opts.FakeClientset != nil || opts.FakeDynamic != nil
	switch {
	case !own && opts.ClusterProvider == nil:
		return nil, errors.New("ctrl: NewManager: set Options.Config, or Options.FakeClientset or Options.FakeDynamic for fakes")
	case !own && (opts.LeaderElection.Name != "" || opts.Sharding.Ring != ""):
		return nil, errors.New("ctrl: NewManager: leader election and sharding keep their Leases in the manager's own cluster: set Options.Config")
	}
	if opts.FieldManager == "" {
		opts.FieldManager = transport.ProgramName()
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 2 * time.Minute
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if err := serve.TLS(opts.TLS).Check(); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: %w", err)
	}
	m := &Manager{
		opts:        opts,
		log:         opts.Logger,
		bindings:    map[bindingID]any{},
		members:     map[string]*member{},
		caches:      map[cacheID]managedCache{},
		controllers: map[string]managedController{},
		startedCh:   make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	m.policy = act.Everyone{}
	reg := opts.Registerer
	if reg == nil {
		m.registry = prometheus.NewRegistry()
		m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = m.registry
	}
	var err error
	if m.metrics, err = metrics.New(reg); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: registering metrics: %w", err)
	}
	m.clients = binding.Clients{Clientset: opts.FakeClientset, Dynamic: opts.FakeDynamic}
	binding.LikeServer(opts.FakeClientset)
	binding.LikeServer(opts.FakeDynamic)
	m.refusals.Log = opts.Logger
	if cfg := opts.Config; cfg != nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(m.refusals.Wrap)
		if m.clients.Config, m.clients.HTTP, m.conns, err = transport.New(cfg, opts.ConnectionCheck, opts.Compression); err != nil {
			return nil, fmt.Errorf("ctrl: NewManager: %w", err)
		}
		m.clients.Discover = binding.NewDiscover(m.clients.Config, m.clients.HTTP)
	}
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	m.events.Bind = func(cluster string) (*binding.Binding[*corev1.Event], error) {
		return bindIn[*corev1.Event](m, cluster, APIResource{})
	}
	m.events.Lost = m.leadership.Lost
	switch {
	case opts.Sharding.Ring != "":
		member, err := newSharding(m, opts)
		if err != nil {
			return nil, err
		}
		m.policy, m.identity = member, member.Identity()
		m.grants.Need(leases, "get", "create", "update", "delete")
	case opts.LeaderElection.Name != "":
		e, err := newElection(m, opts)
		if err != nil {
			return nil, err
		}
		m.policy, m.identity = e, e.Config.Identity
		m.grants.Need(leases, "get", "create", "update")
	}
	return m, nil
}

// Registry returns the registry holding the manager's metrics, or nil if
// Options.Registerer was set.
func (m *Manager) Registry() *prometheus.Registry { return m.registry }

// Start opens the HTTP endpoints, starts every cache, waits for their first
// lists, and starts the controllers' workers (with leader election, once
// leading). It blocks until ctx is done or a fatal error occurs. On
// shutdown, running reconciles get up to Options.ShutdownTimeout (then are
// canceled) while the Lease is renewed; then the Lease is released and
// caches and servers stop.
//
// Start returns nil after a shutdown through ctx, otherwise the error: an
// address that cannot be bound, a cache unsynced after Options.SyncTimeout
// (named by type), an unserved resource, a lost Lease (wrapping
// [ErrLeadershipLost], unless LeaderElection.StandbyOnLoss), or a shutdown
// timeout. Reconcile errors never stop it. Start may be called once.
func (m *Manager) Start(ctx context.Context) (err error) {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return fmt.Errorf("ctrl: Start: %w", ErrStarted)
	}
	m.started = true
	ctrls := append([]managedController(nil), m.ctrlList...)
	for _, c := range ctrls {
		c.prepare()
	}
	m.mu.Unlock()
	defer func() {
		for _, c := range ctrls {
			_ = c.shutdown(0) // idempotent; releases queues that never started
		}
		m.mu.Lock()
		m.startErr = err
		m.mu.Unlock()
		close(m.stopped)
	}()

	memlimit.Apply(m.opts.MemoryLimit, m.opts.FakeClientset != nil || m.opts.FakeDynamic != nil, m.log)
	servers, err := m.listen()
	if err != nil {
		return err
	}
	defer servers.Shutdown()

	// run is canceled by ctx or by the first fatal error (m.fail).
	run, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	m.mu.Lock()
	m.fail = fail
	cacheCtx, stopCaches := context.WithCancel(context.WithoutCancel(ctx))
	m.running = cacheCtx
	for _, c := range m.cacheList {
		m.startCache(c)
	}
	caches := append([]managedCache(nil), m.cacheList...)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running = nil // caches created from now on never start
		members := slices.Collect(maps.Values(m.members))
		m.mu.Unlock()
		stopCaches()
		m.wg.Wait()
		m.conns.CloseAll()
		for _, mb := range members {
			mb.conns.CloseAll()
		}
	}()
	m.runProvider(cacheCtx)
	servers.Serve(func(err error) { m.fatal(fmt.Errorf("ctrl: %w", err)) })
	stopEvents := m.events.Start()
	defer stopEvents()

	m.log.Info("starting", "caches", len(caches), "controllers", len(ctrls))
	err = m.policy.Run(run, func(stop context.Context) error {
		if err := m.waitForSync(stop, caches); err != nil {
			return err
		}
		return m.lead(stop, ctx, ctrls)
	})
	if err == nil {
		if cause := context.Cause(run); ctx.Err() == nil && cause != nil {
			err = cause // a fatal error, not a shutdown
		}
	}
	if err == nil {
		m.log.Info("stopped")
	}
	return err
}
