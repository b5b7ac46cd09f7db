// Package metrics holds a manager's Prometheus metrics. Names, labels and
// buckets are controller-runtime's, so its dashboards and alerts work
// unchanged; the ctrl_cache_* family is ctrl's own.
package metrics

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Set is one manager's metrics.
type Set struct {
	reconcileTotal  *prometheus.CounterVec
	reconcileErrors *prometheus.CounterVec
	terminalErrors  *prometheus.CounterVec
	reconcilePanics *prometheus.CounterVec
	reconcileTime   *prometheus.HistogramVec
	maxConcurrent   *prometheus.GaugeVec
	activeWorkers   *prometheus.GaugeVec
	depth           *prometheus.GaugeVec
	adds            *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	workDuration    *prometheus.HistogramVec
	unfinished      *prometheus.GaugeVec
	longestRunning  *prometheus.GaugeVec
	retries         *prometheus.CounterVec
	causes          *prometheus.CounterVec
	waiting         *prometheus.GaugeVec
	released        *prometheus.CounterVec
	timeouts        *prometheus.CounterVec
	sharedChanges   *prometheus.CounterVec
	recoveryWait    *prometheus.HistogramVec
	LeaderStatus    *prometheus.GaugeVec
	ShardObjects    *prometheus.GaugeVec
	ShardShare      *prometheus.GaugeVec
	ShardMembers    *prometheus.GaugeVec
	ShardMode       *prometheus.GaugeVec
	ShardHandovers  *prometheus.CounterVec
	ShardLabels     *prometheus.CounterVec
	WatchConnected  *prometheus.GaugeVec
	Relists         *prometheus.CounterVec
	WatchMoves      *prometheus.CounterVec
	Blind           *prometheus.HistogramVec
	WaitingForCRD   *prometheus.GaugeVec
	listMode        *prometheus.GaugeVec
}

// New registers a manager's metrics with reg. Collectors already there
// (from another manager sharing reg) are reused. Histograms have classic
// buckets only: controller-runtime also exposes native histograms, whose
// per-observation cost (a concurrent map lookup) showed in the reconcile
// path's CPU profile; dashboards read the classic buckets.
func New(reg prometheus.Registerer) (*Set, error) {
	ctrlLabel := []string{"controller"}
	queueLabels := []string{"name", "controller"}
	cacheLabels := []string{"resource", "namespace", "cluster"}
	m := &Set{
		reconcileTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_total",
			Help: "Total number of reconciliations per controller",
		}, []string{"controller", "result"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_errors_total",
			Help: "Total number of reconciliation errors per controller",
		}, ctrlLabel),
		terminalErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_terminal_reconcile_errors_total",
			Help: "Total number of terminal reconciliation errors per controller",
		}, ctrlLabel),
		reconcilePanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_panics_total",
			Help: "Total number of reconciliation panics per controller",
		}, ctrlLabel),
		reconcileTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "controller_runtime_reconcile_time_seconds",
			Help: "Length of time per reconciliation per controller",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
				1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60},
		}, ctrlLabel),
		maxConcurrent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_max_concurrent_reconciles",
			Help: "Maximum number of concurrent reconciles per controller",
		}, ctrlLabel),
		activeWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_active_workers",
			Help: "Number of currently used workers per controller",
		}, ctrlLabel),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "depth",
			Help: "Current depth of workqueue",
		}, queueLabels),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total",
			Help: "Total number of adds handled by workqueue",
		}, queueLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help:    "How long in seconds an item stays in workqueue before being requested",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
		}, queueLabels),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "work_duration_seconds",
			Help:    "How long in seconds processing an item from workqueue takes.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
		}, queueLabels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. " +
				"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
		}, queueLabels),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running.",
		}, queueLabels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total",
			Help: "Total number of retries handled by workqueue",
		}, queueLabels),
		causes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_reconcile_causes_total",
			Help: "Reconciles per controller by what queued them: once under each reason among a reconcile's causes.",
		}, []string{"controller", "reason"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_keys_waiting_for_server",
			Help: "Keys whose reconcile failed because the API server was unreachable, waiting for it to answer again.",
		}, ctrlLabel),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_retries_released_total",
			Help: "Keys queued again because the API server answered after they failed on its absence.",
		}, ctrlLabel),
		sharedChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_reconcile_shared_object_changes_total",
			Help: "Checked reconciles found changing the cached object they were handed (a copy); outside tests the controller then copies.",
		}, ctrlLabel),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_reconcile_timeouts_total",
			Help: "Reconciles that ran past the controller's ReconcileTimeout, whose context was canceled.",
		}, ctrlLabel),
		recoveryWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ctrl_wait_after_recovery_seconds",
			Help:    "How long a key released by the API server's return waited for its reconcile to begin.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
		}, ctrlLabel),
		ShardObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_shard_objects",
			Help: "Objects the caches of this replica's sharded controllers hold; replica is its identity.",
		}, []string{"ring", "replica"}),
		ShardShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_shard_share",
			Help: "The part of the ring's units this replica serves, from 0 to 1: of the 64 buckets of the hash space, or of the namespaces when sharded by namespace.",
		}, []string{"ring"}),
		ShardMembers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_shard_members",
			Help: "Live members of the ring, this replica included, as it last counted them.",
		}, []string{"ring"}),
		ShardMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_shard_mode",
			Help: "1 for the way the ring selects each replica's objects: mode \"server\" (the API server selects by hash) or \"labels\" (caches select on the shard label).",
		}, []string{"ring", "mode"}),
		ShardHandovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_shard_handovers_total",
			Help: "Changes of what this replica serves: direction \"released\" when it gave part of the space up, \"taken\" when it began to serve more.",
		}, []string{"ring", "direction"}),
		ShardLabels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_shard_labels_total",
			Help: "Shard labels this replica wrote on objects, in mode \"labels\": one per object, when it first serves it.",
		}, []string{"ring"}),
		WatchConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_cache_watch_connected",
			Help: "Whether the cache's list or watch last succeeded (1) or failed (0).",
		}, cacheLabels),
		Relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_cache_relists_total",
			Help: "Complete lists after the first, when a watch could not resume (410 Gone).",
		}, cacheLabels),
		WatchMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_cache_watch_moves_total",
			Help: "Watches that resumed on another connection: connection \"own\" when a busy watch moved to an HTTP/1.1 connection of its own, \"shared\" when it went quiet there and moved back to the shared HTTP/2 connection.",
		}, append(slices.Clone(cacheLabels), "connection")),
		Blind: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ctrl_cache_blind_seconds",
			Help:    "How long the cache went without a working list or watch, per outage.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, cacheLabels),
		listMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_cache_list_mode",
			Help: "How the cache lists: mode \"streaming\" (a watch that sends the objects first, where the API server allows it) or \"paged\" (a list in pages), 1 for the mode of its last list.",
		}, append(slices.Clone(cacheLabels), "mode")),
		WaitingForCRD: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ctrl_cache_waiting_for_crd",
			Help: "Whether an optional kind waits for its CustomResourceDefinition (1) or is served (0), by resource: the CRD's name.",
		}, []string{"resource"}),
		LeaderStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leader_election_master_status",
			Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
		}, []string{"name"}),
	}
	var err error
	for _, c := range []any{
		&m.reconcileTotal, &m.reconcileErrors, &m.terminalErrors, &m.reconcilePanics, &m.reconcileTime,
		&m.maxConcurrent, &m.activeWorkers, &m.depth, &m.adds, &m.latency, &m.workDuration, &m.unfinished,
		&m.longestRunning, &m.retries, &m.causes, &m.waiting, &m.released, &m.recoveryWait,
		&m.LeaderStatus, &m.ShardObjects, &m.ShardShare, &m.ShardMembers, &m.ShardMode, &m.ShardHandovers, &m.ShardLabels, &m.WatchConnected, &m.Relists, &m.WatchMoves, &m.Blind, &m.listMode,
		&m.timeouts, &m.sharedChanges, &m.WaitingForCRD,
	} {
		switch c := c.(type) {
		case **prometheus.CounterVec:
			*c, err = register(reg, *c)
		case **prometheus.GaugeVec:
			*c, err = register(reg, *c)
		case **prometheus.HistogramVec:
			*c, err = register(reg, *c)
		}
		if err != nil {
			return nil, err
		}
	}
	// client-go reports its requests to one process-wide hook: every
	// manager registers the same collectors.
	rest := restClient
	for _, c := range []prometheus.Collector{rest.requests, rest.latency} {
		if _, err := register(reg, c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers c, or returns the equal collector registered before,
// so that several managers can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Controller is one controller's series, resolved once so that the
// reconcile path does no label lookups.
type Controller struct {
	Success, RequeueAfter, Errored prometheus.Counter
	Errors, Terminal, Panics       prometheus.Counter
	Time                           prometheus.Observer
	Active                         prometheus.Gauge
	Causes                         []prometheus.Counter // by reason, in the order given
	Waiting                        prometheus.Gauge
	Released                       prometheus.Counter
	WaitAfterRecovery              prometheus.Observer
	Timeouts                       prometheus.Counter
	SharedChanges                  prometheus.Counter
}

// Controller returns the series of the controller named name; reasons are
// the values of the reason label of ctrl_reconcile_causes_total.
func (m *Set) Controller(name string, workers int, reasons []string) Controller {
	causes := make([]prometheus.Counter, len(reasons))
	for i, r := range reasons {
		causes[i] = m.causes.WithLabelValues(name, r)
	}
	m.maxConcurrent.WithLabelValues(name).Set(float64(workers))
	m.reconcileTotal.WithLabelValues(name, "requeue") // present at zero, as in controller-runtime
	return Controller{
		Success:           m.reconcileTotal.WithLabelValues(name, "success"),
		RequeueAfter:      m.reconcileTotal.WithLabelValues(name, "requeue_after"),
		Errored:           m.reconcileTotal.WithLabelValues(name, "error"),
		Errors:            m.reconcileErrors.WithLabelValues(name),
		Terminal:          m.terminalErrors.WithLabelValues(name),
		Panics:            m.reconcilePanics.WithLabelValues(name),
		Time:              m.reconcileTime.WithLabelValues(name),
		Active:            m.activeWorkers.WithLabelValues(name),
		Causes:            causes,
		Waiting:           m.waiting.WithLabelValues(name),
		Released:          m.released.WithLabelValues(name),
		WaitAfterRecovery: m.recoveryWait.WithLabelValues(name),
		Timeouts:          m.timeouts.WithLabelValues(name),
		SharedChanges:     m.sharedChanges.WithLabelValues(name),
	}
}

// SetListMode records how the cache of the labels cacheLabels names made its
// last list: streaming or in pages.
func (m *Set) SetListMode(labels []string, streaming bool) {
	set := func(mode string, on bool) {
		v := 0.0
		if on {
			v = 1
		}
		m.listMode.WithLabelValues(append(slices.Clone(labels), mode)...).Set(v)
	}
	set("streaming", streaming)
	set("paged", !streaming)
}

// ForgetListMode deletes the list mode series of a cache's feed that stopped.
func (m *Set) ForgetListMode(labels []string) {
	for _, mode := range []string{"streaming", "paged"} {
		m.listMode.DeleteLabelValues(append(slices.Clone(labels), mode)...)
	}
}

// ForgetController deletes the series of the controller named name, and of
// its work queue: the controller was stopped.
func (m *Set) ForgetController(name string) {
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{
		m.reconcileTotal, m.reconcileErrors, m.terminalErrors, m.reconcilePanics, m.reconcileTime,
		m.maxConcurrent, m.activeWorkers, m.depth, m.adds, m.latency, m.workDuration, m.unfinished,
		m.longestRunning, m.retries, m.causes, m.waiting, m.released, m.recoveryWait, m.timeouts, m.sharedChanges,
	} {
		v.DeletePartialMatch(prometheus.Labels{"controller": name})
	}
}

// Queue returns the metrics provider of controllers' work queues.
func (m *Set) Queue() workqueue.MetricsProvider { return queueProvider{m} }

// queueProvider gives client-go's workqueue its metrics, labeled with the
// controller's name as both name and controller.
type queueProvider struct{ m *Set }

func (p queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.m.depth.WithLabelValues(name, name)
}

func (p queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.m.adds.WithLabelValues(name, name)
}

func (p queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.m.latency.WithLabelValues(name, name)
}

func (p queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.m.workDuration.WithLabelValues(name, name)
}

func (p queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.unfinished.WithLabelValues(name, name)
}

func (p queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.longestRunning.WithLabelValues(name, name)
}

func (p queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.m.retries.WithLabelValues(name, name)
}

// restMetrics are client-go's request metrics, with controller-runtime's
// names: rest_client_requests_total and rest_client_request_duration_seconds.
type restMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// restClient is registered with client-go when the program starts, as
// controller-runtime registers its own: client-go reads its hooks without a
// lock on every request, so registering them later, at the first manager,
// races with requests that other goroutines already send.
var restClient = newRestMetrics()

func newRestMetrics() restMetrics {
	r := restMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total",
			Help: "Number of HTTP requests, partitioned by status code, method, and host.",
		}, []string{"code", "method", "host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rest_client_request_duration_seconds",
			Help:    "Request latency in seconds. Broken down by verb and host.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
		}, []string{"verb", "host"}),
	}
	// A no-op if something else in the process registered first.
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  resultAdapter{r.requests},
		RequestLatency: latencyAdapter{r.latency},
	})
	return r
}

type resultAdapter struct{ m *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.m.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ m *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.m.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}
