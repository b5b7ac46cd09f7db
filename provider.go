package ctrl

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/typedctrl/ctrl/internal/provider"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
)

// KubeconfigDir returns a [Provider] of the member clusters whose
// kubeconfig files are in dir: a member per file, named after the file
// without its extension (.yaml, .yml, .json, .kubeconfig, .conf or none),
// reached through the file's current context; other and hidden files are
// ignored. The directory is read every two seconds: a file added or
// changed engages its member, a file removed disengages it. A file that
// does not load, or whose name is not a DNS label, is logged and skipped
// until it changes; of two files that name one member, the first in
// lexical order serves it.
func KubeconfigDir(dir string) Provider { return kubeconfigDir{provider.NewDir(dir, 2*time.Second)} }

type kubeconfigDir struct{ dir *provider.Dir }

func (p kubeconfigDir) Run(ctx context.Context, e Engager) error {
	return p.dir.Run(ctx, configEngager{e})
}

// configEngager engages members reached by their rest.Config.
type configEngager struct{ Engager }

func (e configEngager) Engage(name string, cfg *rest.Config) error {
	return e.Engager.Engage(name, Member{Config: cfg})
}

// KubeconfigSecrets returns a [Provider] of the member clusters whose
// kubeconfigs are Secrets in the manager's own cluster: those in namespace
// that match selector (nil: all), a member per Secret, named after it,
// reached through its data key "kubeconfig". A Secret added or changed
// engages its member; one deleted, or no longer matching, disengages it.
// It watches the Secrets with a cache of the manager it is given to.
func KubeconfigSecrets(namespace string, selector labels.Selector) Provider {
	return &kubeconfigSecrets{namespace: namespace, selector: selector}
}

// kubeconfigSecrets follows the hub's cache of the members' Secrets.
type kubeconfigSecrets struct {
	namespace string
	selector  labels.Selector
	members   Engager
	log       logr.Logger
}

func (p *kubeconfigSecrets) Run(ctx context.Context, e Engager) error {
	m, ok := e.(*Manager)
	if !ok {
		return fmt.Errorf("KubeconfigSecrets: its Engager must be a *ctrl.Manager, got %T", e)
	}
	p.members = m
	p.log = logr.FromContextOrDiscard(ctx).WithValues("provider", "kubeconfig Secrets", "namespace", p.namespace)
	c, err := makeCache(m, CacheOptions{Namespaces: []string{p.namespace}, LabelSelector: p.selector}, use[*corev1.Secret]{handler: p, pin: true})
	if err != nil {
		return fmt.Errorf("KubeconfigSecrets: %w", err)
	}
	if err := c.WaitForSync(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("KubeconfigSecrets: %w", err)
	}
	<-ctx.Done()
	return nil
}

func (p *kubeconfigSecrets) changed(ev event[*corev1.Secret]) {
	switch ev.kind {
	case added, updated:
		if ev.kind == updated && string(ev.old.Data["kubeconfig"]) == string(ev.obj.Data["kubeconfig"]) {
			return
		}
		if err := provider.Engage(configEngager{p.members}, ev.obj.Name, ev.obj.Data["kubeconfig"]); err != nil {
			p.log.Error(err, "skipping a kubeconfig Secret", "secret", ev.key)
		}
	case deleted, left, vanished, forgotten:
		p.members.Disengage(ev.obj.Name)
	}
}

func (p *kubeconfigSecrets) listed(evs []event[*corev1.Secret]) {
	for _, ev := range evs {
		p.changed(ev)
	}
}
