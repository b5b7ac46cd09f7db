package ctrl

import (
	"cmp"
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
)

// LeaderElection configures leader election among replicas of a program.
// The zero value turns it off: every replica reconciles. With Name set, only
// the replica holding the coordination.k8s.io/v1 Lease of that name runs
// its controllers (see the package's guarantees: One leader). Writes made
// outside ctrl's clients are not fenced: call [CheckLeadership] before each.
type LeaderElection struct {
	// Name of the Lease. Empty: no leader election.
	Name string
	// LeaseOptions: the Lease's namespace, this replica's identity, timing.
	LeaseOptions
	// StandbyOnLoss makes a replica that lost the Lease stand by instead of
	// exiting: its reconciles are canceled (Start waits up to
	// Options.ShutdownTimeout for them), its caches stay warm, and it
	// campaigns again. Default: off: Start returns an error wrapping
	// [ErrLeadershipLost].
	StandbyOnLoss bool
}

// LeaseOptions configures the coordination.k8s.io/v1 Lease a replica
// holds, for [LeaderElection] and [Sharding] alike. The zero value takes
// the defaults, which are controller-runtime's.
type LeaseOptions struct {
	// Namespace of the Lease. Default: Options.Namespace, or in a pod its
	// namespace (as its service account's token says), or "default".
	Namespace string
	// Identity of this replica in the Lease, unique among the replicas
	// running at once (a DNS label, with Sharding); see [Manager.Identity].
	// Default: the host name, cut to fit, and a random suffix.
	Identity string
	// LeaseDuration is how long the other replicas wait, after this one
	// last renewed, before taking over what it holds. Default: 15 s, or 1.5
	// times RenewDeadline if only that is set.
	LeaseDuration time.Duration
	// RenewDeadline, shorter than LeaseDuration, is how long this replica
	// may act after the start of its last successful renewal (One leader).
	// Default: two thirds of LeaseDuration (10 s).
	RenewDeadline time.Duration
	// RetryPeriod is how often the Lease is acquired or renewed. Default:
	// two fifteenths of LeaseDuration (2 s).
	RetryPeriod time.Duration
}

// lease resolves o for the Lease named name(identity); what is for errors.
func (o LeaseOptions) lease(m *Manager, opts Options, what string, name func(identity string) string) (leader.Config, *binding.Binding[*coordinationv1.Lease], error) {
	o.Namespace = cmp.Or(o.Namespace, opts.Namespace, leader.PodNamespace(), "default")
	o.Identity = cmp.Or(o.Identity, leader.NewIdentity())
	b, err := bind[*coordinationv1.Lease](m, APIResource{})
	if err != nil {
		return leader.Config{}, nil, fmt.Errorf("ctrl: NewManager: %s: %w", what, err)
	}
	cfg := leader.Config{Name: name(o.Identity), Namespace: o.Namespace, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		Leases: leader.Bound(b, o.Namespace)}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return leader.Config{}, nil, fmt.Errorf("ctrl: NewManager: %s: %w", what, err)
	}
	cfg.Log = opts.Logger.WithValues("lease", o.Namespace+"/"+cfg.Name, "identity", o.Identity)
	return cfg, b, nil
}

func newElection(m *Manager, opts Options) (*leader.Election, error) {
	le := opts.LeaderElection
	cfg, _, err := le.lease(m, opts, "leader election", func(string) string { return le.Name })
	if err != nil {
		return nil, err
	}
	m.leadership.Gauge = m.metrics.LeaderStatus.WithLabelValues(le.Name)
	m.leadership.Gauge.Set(0)
	return &leader.Election{Config: cfg, Standby: le.StandbyOnLoss}, nil
}

// Leading reports whether this replica leads now, and returns a channel
// closed when the answer may have changed. With leader election it leads
// until its deadline (One leader), false at once past it even if the
// process was paused, the channel closed once it notices; with [Sharding],
// while it holds its membership; otherwise while Start runs its
// controllers, never before or after. It never blocks.
func (m *Manager) Leading() (leading bool, changed <-chan struct{}) { return m.leadership.Leading() }

// CheckLeadership returns an error wrapping [ErrLeadershipLost] if ctx is
// (or derives from) a reconcile's whose leadership has ended, even if
// nothing has noticed yet: it reads the clock. Otherwise it returns nil.
// ctrl's clients check before every write; check before writes that do
// not go through them. It never blocks.
func CheckLeadership(ctx context.Context) error {
	if err := leader.Check(ctx); err != nil {
		return fmt.Errorf("ctrl: %w", err)
	}
	return nil
}

// acting reports whether this replica may write for its controllers now.
func (m *Manager) acting() bool {
	if m.identity == "" {
		return true
	}
	leading, _ := m.Leading()
	return leading
}

// Identity returns the identity this replica holds its Lease under, as
// set in LeaseOptions or chosen for it; "" without leader election and
// sharding.
func (m *Manager) Identity() string { return m.identity }
