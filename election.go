package ctrl

import (
	"context"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/leader"
)

// LeaderElection configures leader election among replicas of a program.
// The zero value turns it off: every replica reconciles. With Name set, only
// the replica holding the coordination.k8s.io/v1 Lease of that name runs
// its controllers; the others keep their caches synced so that a takeover
// reconciles at once. The defaults are controller-runtime's.
type LeaderElection struct {
	// Name of the Lease. Empty: no leader election.
	Name string
	// Namespace of the Lease. Default: Options.Namespace, or "default".
	Namespace string
	// Identity of this replica in the Lease. Default: the host name and a
	// random suffix.
	Identity string
	// LeaseDuration is how long other replicas wait, after the leader last
	// renewed, before taking over from a leader that stopped without
	// releasing the Lease (it crashed). Default: 15 seconds.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up, stops its controllers, and makes Start return an error.
	// Default: 10 seconds.
	RenewDeadline time.Duration
	// RetryPeriod is how often replicas try to acquire or renew. Default:
	// 2 seconds.
	RetryPeriod time.Duration
}

// electionConfig fills in the defaults and checks the durations. The Lease
// client is added by elect, once the manager runs.
func electionConfig(opts Options) (*leader.Config, error) {
	le := opts.LeaderElection
	if le.Namespace == "" {
		le.Namespace = opts.Namespace
	}
	if le.Namespace == "" {
		le.Namespace = "default"
	}
	if le.Identity == "" {
		host, _ := os.Hostname()
		le.Identity = host + "_" + rand.String(8)
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 15 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = 10 * time.Second
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = 2 * time.Second
	}
	cfg := &leader.Config{
		Name:          le.Name,
		Namespace:     le.Namespace,
		Identity:      le.Identity,
		LeaseDuration: le.LeaseDuration,
		RenewDeadline: le.RenewDeadline,
		RetryPeriod:   le.RetryPeriod,
		Log:           opts.Logger.WithValues("lease", le.Namespace+"/"+le.Name),
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ctrl: NewManager: leader election: %w", err)
	}
	return cfg, nil
}

// elect campaigns for the Lease and runs the controllers while it holds it.
func (m *Manager) elect(run, ctx context.Context, ctrls []managedController) error {
	b, err := bind[*coordinationv1.Lease](m, APIResource{})
	if err != nil {
		return err
	}
	cfg := *m.election
	cfg.Leases = leases{b, cfg.Namespace}
	status := m.metrics.LeaderStatus.WithLabelValues(cfg.Name)
	status.Set(0)
	cfg.OnStatus = func(leading bool) {
		status.Set(map[bool]float64{true: 1, false: 0}[leading])
	}
	m.log.Info("waiting to become leader", "lease", cfg.Name, "identity", cfg.Identity)
	var leadErr error
	err = leader.Run(run, cfg, func(leadCtx context.Context) {
		leadErr = m.lead(leadCtx, ctx, ctrls)
	})
	if err != nil {
		return fmt.Errorf("ctrl: %w: lease %s", err, cfg.Name)
	}
	return leadErr
}

// leases serves the elector's Lease reads and writes through the binding.
type leases struct {
	b  *binding.Binding[*coordinationv1.Lease]
	ns string
}

func (l leases) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return l.b.Get(ctx, l.ns, name, metav1.GetOptions{})
}

func (l leases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	lease.Namespace = l.ns
	return l.b.Create(ctx, lease, metav1.CreateOptions{})
}

func (l leases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return l.b.Update(ctx, lease, metav1.UpdateOptions{})
}
