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
// does not load, is refused (see [KubeconfigOptions]), or whose name is
// not a DNS label, is logged and skipped until it changes; of two files
// that name one member, the first in lexical order serves it.
// Only those trusted with what the controllers read and write in members
// may write to dir (README.md#many-clusters).
func KubeconfigDir(dir string, opts KubeconfigOptions) Provider {
	return kubeconfigDir{provider.NewDir(dir, 2*time.Second, opts.AllowExecAndFiles)}
}

// KubeconfigOptions say what [KubeconfigDir] and [KubeconfigSecrets]
// accept in a kubeconfig.
type KubeconfigOptions struct {
	// AllowExecAndFiles honours exec plugins, auth providers and files
	// (tokenFile, certificate-authority, client-certificate, client-key),
	// with which whoever writes a kubeconfig runs code as the operator or
	// sends its files (its ServiceAccount token) to a server of theirs:
	// only where no one but the operator's administrator writes them.
	// Default: refused, naming the file or Secret and each field.
	AllowExecAndFiles bool
}

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
// reached through its data key "kubeconfig", checked as opts say. A Secret
// added or changed engages its member; one deleted, or no longer matching,
// disengages it; one refused is logged. It watches the Secrets with a
// cache of the manager it is given to. Only those trusted with what the
// controllers read and write in members may write Secrets in namespace,
// whatever selector says (README.md#many-clusters).
func KubeconfigSecrets(namespace string, selector labels.Selector, opts KubeconfigOptions) Provider {
	return &kubeconfigSecrets{namespace: namespace, selector: selector, trusted: opts.AllowExecAndFiles}
}

// kubeconfigSecrets follows the hub's cache of the members' Secrets.
type kubeconfigSecrets struct {
	namespace string
	selector  labels.Selector
	trusted   bool
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
		if ev.kind == updated && string(ev.old.Data[provider.SecretKey]) == string(ev.obj.Data[provider.SecretKey]) {
			return
		}
		if err := provider.EngageSecret(configEngager{p.members}, ev.obj.Namespace, ev.obj.Name, ev.obj.Data, p.trusted); err != nil {
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
