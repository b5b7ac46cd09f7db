package ctrl

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/typedctrl/ctrl/internal/serve"
)

// listen binds first, so a taken port is an error from Start.
func (m *Manager) listen() (*serve.Servers, error) {
	gatherer, err := m.gatherer()
	if err != nil {
		return nil, err
	}
	cfg := serve.Config{
		Log:           m.log,
		TLS:           serve.TLS(m.opts.TLS),
		HealthAddress: m.opts.HealthAddress,
		Ready:         m.readiness,
		PprofAddress:  m.opts.PprofAddress,
	}
	if cfg.Metrics, err = m.metricsEndpoint(gatherer); err != nil {
		return nil, err
	}
	if cfg.Webhook, err = m.webhookEndpoint(); err != nil {
		return nil, err
	}
	s, err := serve.Listen(cfg)
	if err != nil {
		return nil, fmt.Errorf("ctrl: Start: %w", err)
	}
	m.mu.Lock()
	m.addresses = Addresses(s.Addresses())
	m.mu.Unlock()
	return s, nil
}

func (m *Manager) gatherer() (prometheus.Gatherer, error) {
	if m.registry != nil {
		return m.registry, nil
	}
	if g, ok := m.opts.Registerer.(prometheus.Gatherer); ok {
		return g, nil
	}
	if m.opts.MetricsAddress == "" {
		return nil, nil
	}
	return nil, errors.New("ctrl: Start: Options.MetricsAddress needs an Options.Registerer that is also a prometheus.Gatherer")
}

// readiness is /readyz: a line per cache not synced or forbidden, and what
// is reported without failing it. Synced caches stay ready through an
// outage: a restart would not help.
func (m *Manager) readiness() serve.Readiness {
	m.mu.Lock()
	caches, fleet := slices.Clone(m.cacheList), slices.Clone(m.fleetCaches)
	m.mu.Unlock()
	r := serve.Readiness{Policy: m.policy.State(), Refused: m.refusals.Lines()}
	for _, c := range caches {
		if why := c.notReady(); why != "" {
			r.NotReady = append(r.NotReady, c.describe()+": "+why)
		}
		if line := c.waitingForCRD(); line != "" {
			r.Optional = append(r.Optional, line)
		}
		if warn := c.warning(); warn != "" {
			r.Warnings = append(r.Warnings, c.describe()+": "+warn)
		}
	}
	for _, fc := range fleet {
		r.Members = append(r.Members, fc.memberStates()...)
	}
	return r
}

// Addresses are the addresses the manager's HTTP endpoints listen on, with
// their ports resolved ("127.0.0.1:0" becomes "127.0.0.1:41235"). An
// endpoint that is off, or not bound yet, is "".
type Addresses struct {
	Metrics string // Options.MetricsAddress
	Health  string // Options.HealthAddress
	Pprof   string // Options.PprofAddress
	Webhook string // Options.WebhookAddress
}

// Addresses returns where the manager's HTTP endpoints listen, bound by
// Start before it waits for the caches.
func (m *Manager) Addresses() Addresses {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addresses
}
