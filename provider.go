package ctrl

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigDir returns a [Provider] of the member clusters whose
// kubeconfig files are in dir: a member per file, named after the file
// without its extension (.yaml, .yml, .json, .kubeconfig, .conf or none:
// "east.yaml" is the member "east"), reached through the file's current
// context. Other files, such as an editor's "east.yaml~" or "east.yaml.swp",
// and hidden files are ignored. The directory is read every two seconds:
// a file added engages its member, a file changed (new credentials, say)
// engages it anew, a file removed disengages it. A file that does not
// load, or whose name is not a DNS label, is logged and skipped until it
// changes; of two files that name one member ("east.yaml" and
// "east.yml"), the first in lexical order serves it, and the other is
// logged once and ignored.
func KubeconfigDir(dir string) Provider { return &kubeconfigDir{dir: dir, every: 2 * time.Second} }

type kubeconfigDir struct {
	dir   string
	every time.Duration
}

func (p *kubeconfigDir) Run(ctx context.Context, fleet Fleet) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("provider", "kubeconfig files", "dir", p.dir)
	seen := map[string][32]byte{} // member -> hash of its file, engaged or not
	shadowed := map[string]bool{} // files logged as naming a member another file serves
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		entries, err := os.ReadDir(p.dir) // sorted by file name
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Error(err, "cannot read the directory of kubeconfig files")
		}
		present, files := map[string]bool{}, map[string]bool{}
		for _, e := range entries {
			files[e.Name()] = true
			name, ok := memberName(e.Name())
			if e.IsDir() || !ok {
				continue
			}
			if present[name] {
				if !shadowed[e.Name()] {
					shadowed[e.Name()] = true
					log.Error(nil, "ignoring a kubeconfig file: another file names the same member", "file", e.Name(), "member", name)
				}
				continue
			}
			data, err := os.ReadFile(filepath.Join(p.dir, e.Name()))
			if err != nil {
				continue // removed meanwhile
			}
			present[name] = true
			sum := sha256.Sum256(data)
			if prev, ok := seen[name]; ok && prev == sum {
				continue
			}
			seen[name] = sum
			if err := engageKubeconfig(fleet, name, data); err != nil {
				log.Error(err, "skipping a kubeconfig file", "file", e.Name())
			}
		}
		for name := range seen {
			if !present[name] {
				delete(seen, name)
				fleet.Disengage(name)
			}
		}
		for f := range shadowed {
			if !files[f] {
				delete(shadowed, f)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// memberName returns the member a file in a KubeconfigDir names, and
// whether it names one.
func memberName(file string) (string, bool) {
	if strings.HasPrefix(file, ".") {
		return "", false
	}
	switch ext := filepath.Ext(file); ext {
	case "", ".yaml", ".yml", ".json", ".kubeconfig", ".conf":
		return strings.TrimSuffix(file, ext), true
	}
	return "", false
}

// engageKubeconfig engages name with the current context of a kubeconfig.
func engageKubeconfig(fleet Fleet, name string, kubeconfig []byte) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("member %q: the name must be a DNS label: %s", name, errs[0])
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("member %q: %w", name, err)
	}
	return fleet.Engage(name, Cluster{Config: cfg})
}

// KubeconfigSecrets returns a [Provider] of the member clusters whose
// kubeconfigs are Secrets in the manager's own cluster (the hub): the
// Secrets in namespace that match selector (nil: all), a member per
// Secret, named after it, reached through the kubeconfig in its data key
// "kubeconfig". A Secret added or changed engages its member; one deleted,
// or no longer matching, disengages it. It watches the Secrets with a
// cache of the manager it is given to (Options.ClusterProvider).
func KubeconfigSecrets(namespace string, selector labels.Selector) Provider {
	return &kubeconfigSecrets{namespace: namespace, selector: selector}
}

// kubeconfigSecrets engages and disengages members as the hub's cache of
// their Secrets changes.
type kubeconfigSecrets struct {
	namespace string
	selector  labels.Selector
	fleet     Fleet
	log       logr.Logger
}

func (p *kubeconfigSecrets) Run(ctx context.Context, fleet Fleet) error {
	m, ok := fleet.(*Manager)
	if !ok {
		return fmt.Errorf("KubeconfigSecrets: its fleet must be a *ctrl.Manager, got %T", fleet)
	}
	p.fleet = m
	p.log = logr.FromContextOrDiscard(ctx).WithValues("provider", "kubeconfig Secrets", "namespace", p.namespace)
	c, err := newCache(m, CacheOptions{Namespaces: []string{p.namespace}, LabelSelector: p.selector}, handler[*corev1.Secret](p))
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
		if err := engageKubeconfig(p.fleet, ev.obj.Name, ev.obj.Data["kubeconfig"]); err != nil {
			p.log.Error(err, "skipping a kubeconfig Secret", "secret", ev.key)
		}
	default:
		p.fleet.Disengage(ev.obj.Name)
	}
}

func (p *kubeconfigSecrets) listed(evs []event[*corev1.Secret]) {
	for _, ev := range evs {
		p.changed(ev)
	}
}

func (p *kubeconfigSecrets) joined(string) {}
