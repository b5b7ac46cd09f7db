package ctrl

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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

// readiness is /readyz: a line per cache not synced or forbidden, and per
// request refused. Synced caches stay ready through an outage: a restart
// would not help.
func (m *Manager) readiness() (ready bool, body string) {
	m.mu.Lock()
	caches := append([]managedCache(nil), m.cacheList...)
	m.mu.Unlock()
	var notReady, optional []string
	for _, c := range caches {
		if why := c.notReady(); why != "" {
			notReady = append(notReady, c.describe()+": "+why)
		}
		if line := c.waitingForCRD(); line != "" {
			optional = append(optional, line)
		}
	}
	if len(notReady) > 0 {
		return false, fmt.Sprintf("not ready:\n%s\n", strings.Join(notReady, "\n"))
	}
	var w strings.Builder
	fmt.Fprintln(&w, "ok")
	if s := m.policy.State(); s != "" {
		fmt.Fprintln(&w, s)
	}
	slices.Sort(optional)
	for _, line := range optional {
		fmt.Fprintln(&w, line)
	}
	// A cache that lists by watching works without list: reported only.
	for _, c := range caches {
		if warn := c.warning(); warn != "" {
			fmt.Fprintf(&w, "%s: %s\n", c.describe(), warn)
		}
	}
	// So is a write or read the server refuses (caches report their own).
	for _, line := range m.refusals.Lines() {
		fmt.Fprintln(&w, line)
	}
	// A member that is down is reported, not a reason to restart.
	m.mu.Lock()
	fleet := slices.Clone(m.fleetCaches)
	m.mu.Unlock()
	for _, fc := range fleet {
		for _, line := range fc.memberStates() {
			fmt.Fprintln(&w, line)
		}
	}
	return true, w.String()
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
