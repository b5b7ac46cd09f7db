package ctrl

import (
	"context"

	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/transport"
)

// A manager can reconcile a fleet: besides its own cluster (Options.Config,
// the hub), member clusters that join and leave while it runs. A cache
// with CacheOptions.Fleet holds the objects of every member, under keys
// that carry the member's name (Key.Cluster); a controller over such a
// cache reconciles them all ([Client.InCluster], [RequestFrom]). Each member
// has its own connection, watches and recovery: one slow or gone holds up
// no other.

// Member says how to reach a member cluster: Config for a real one, or
// client-go's fakes in tests, as in [Options].
type Member struct {
	Config        *rest.Config
	FakeClientset FakeClientset
	FakeDynamic   dynamic.Interface
}

// Engager is what a [Provider] tells about member clusters; *Manager is one.
type Engager interface {
	// Engage adds the member cluster name, or replaces its configuration.
	Engage(name string, c Member) error
	// Disengage removes the member cluster name, if it is a member.
	Disengage(name string)
}

// A Provider finds the member clusters of a fleet: its Run calls Engage
// for each cluster that appears or changes and Disengage for each that
// goes, until ctx is done. [Manager.Start] runs the provider of
// Options.ClusterProvider; an error from Run other than ctx's stops the manager.
type Provider interface {
	Run(ctx context.Context, e Engager) error
}

// member is an engaged member cluster.
type member struct {
	name     string
	cluster  Member
	clients  binding.Clients
	conns    *transport.Conns // of clients.HTTP's transport, if it is the member's alone
	ctx      context.Context
	cancel   context.CancelFunc
	bindings map[bindingID]any
}

// fleetCache is a fleet cache as the manager sees it.
type fleetCache interface {
	engage(m *member) error
	disengage(name string)
	memberStates() []string // a line per member that is not synced or not connected
}

// Engage makes name a member cluster of the fleet, reached as c says, or
// gives the member a new configuration: its caches start (if the manager
// runs) and, once listed, its objects are reconciled once; an equal
// Member again does nothing. It returns an error for a name that is not
// a DNS label, or a Member without a client.
func (m *Manager) Engage(name string, c Member) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("ctrl: Engage %q: the name must be a DNS label: %s", name, errs[0])
	}
	if c.Config == nil && c.FakeClientset == nil && c.FakeDynamic == nil {
		return fmt.Errorf("ctrl: Engage %q: set Member.Config, or the fakes", name)
	}
	m.mu.Lock()
	prev, ok := m.members[name]
	m.mu.Unlock()
	if ok && sameCluster(prev.cluster, c) {
		return nil
	}
	if ok {
		m.Disengage(name)
	}
	mb := &member{name: name, cluster: c, bindings: map[bindingID]any{}}
	mb.clients = binding.Clients{Clientset: c.FakeClientset, Dynamic: c.FakeDynamic}
	binding.LikeServer(c.FakeClientset)
	binding.LikeServer(c.FakeDynamic)
	if cfg := c.Config; cfg != nil {
		var err error
		if mb.clients.Config, mb.clients.HTTP, mb.conns, err = transport.New(cfg, m.opts.ConnectionCheck, m.opts.Compression); err != nil {
			return fmt.Errorf("ctrl: Engage %q: %w", name, err)
		}
	}
	mb.ctx, mb.cancel = context.WithCancel(context.Background())
	m.mu.Lock()
	if _, raced := m.members[name]; raced {
		m.mu.Unlock()
		mb.cancel()
		return fmt.Errorf("ctrl: Engage %q: engaged concurrently", name)
	}
	m.members[name] = mb
	caches := slices.Clone(m.fleetCaches)
	m.mu.Unlock()
	var errs []error
	for _, fc := range caches {
		errs = append(errs, fc.engage(mb))
	}
	m.log.Info("member cluster engaged", "cluster", name)
	m.activity.Add(1)
	return errors.Join(errs...)
}

// sameCluster reports whether a and b reach a cluster the same way.
func sameCluster(a, b Member) bool {
	return a.FakeClientset == b.FakeClientset && a.FakeDynamic == b.FakeDynamic && transport.Same(a.Config, b.Config)
}

// Disengage removes the member cluster name, if it is one: its caches
// forget its objects, its reconciles are canceled, its queued keys are
// dropped, and its connections are closed.
func (m *Manager) Disengage(name string) {
	m.mu.Lock()
	mb, ok := m.members[name]
	delete(m.members, name)
	caches := slices.Clone(m.fleetCaches)
	ctrls := slices.Clone(m.ctrlList)
	m.mu.Unlock()
	if !ok {
		return
	}
	mb.cancel()
	for _, fc := range caches {
		fc.disengage(name)
	}
	for _, c := range ctrls {
		c.forget(name)
	}
	m.events.StopIn(name)
	mb.conns.CloseAll()
	m.log.Info("member cluster disengaged", "cluster", name)
	m.activity.Add(1)
}

// Clusters returns the names of the engaged member clusters, sorted: for
// a [Watches] mapping that fans a hub object out to every member.
func (m *Manager) Clusters() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.members))
	for name := range m.members {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) memberCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.members)
}

func (m *Manager) memberOf(name string) *member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.members[name]
}

// httpOf returns cluster's HTTP client; nil for fakes and a member that left.
func (m *Manager) httpOf(cluster string) *http.Client {
	if cluster == "" {
		return m.clients.HTTP
	}
	if mb := m.memberOf(cluster); mb != nil {
		return mb.clients.HTTP
	}
	return nil
}

// bindIn resolves T in cluster: the manager's own ("") or a member's.
func bindIn[T Object](m *Manager, cluster string, res APIResource) (*binding.Binding[T], error) {
	if cluster == "" {
		return bind[T](m, res)
	}
	mb := m.memberOf(cluster)
	if mb == nil {
		return nil, fmt.Errorf("ctrl: cluster %q is not an engaged member", cluster)
	}
	return bindWith[T](m, mb.bindings, mb.clients, res)
}

func (m *Manager) runProvider(ctx context.Context) {
	p := m.opts.ClusterProvider
	if p == nil {
		return
	}
	ctx = logr.NewContext(ctx, m.log)
	m.wg.Go(func() {
		if err := p.Run(ctx, m); err != nil && ctx.Err() == nil {
			m.fatal(fmt.Errorf("ctrl: cluster provider: %w", err))
		}
	})
}

// keyFrom returns the key reconciled in ctx, or outside a reconcile obj's.
func keyFrom(ctx context.Context, obj Object) Key {
	if ri, ok := ctx.Value(requestKey{}).(*reconcileInfo); ok {
		return ri.key
	}
	return KeyOf(obj)
}

// memberStates describes the members whose watches are not well, sorted.
func (c *Cache[T]) memberStates() []string {
	var out []string
	for k, f := range c.feedMap() {
		var state string
		switch {
		case k.cluster == "":
			continue
		case !f.isSynced.Load():
			state = "not synced"
		case !f.connected.Load():
			state = "lost its watch"
		default:
			continue
		}
		if err := f.lastErr.Load(); err != nil {
			state += ": " + (*err).Error()
		}
		out = append(out, fmt.Sprintf("cluster %q: %s %s", k.cluster, c, state))
	}
	slices.Sort(out)
	return out
}
