// Package provider finds the member clusters of a fleet in kubeconfig
// files: the machinery behind ctrl.KubeconfigDir and ctrl.KubeconfigSecrets.
package provider

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
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Fleet is what a provider tells about member clusters.
type Fleet interface {
	Engage(name string, cfg *rest.Config) error
	Disengage(name string)
}

// NewDir returns a provider of the members whose kubeconfig files are in
// dir, read every every; see ctrl.KubeconfigDir.
func NewDir(dir string, every time.Duration) *Dir { return &Dir{dir: dir, every: every} }

// Dir is the provider of a directory of kubeconfig files.
type Dir struct {
	dir   string
	every time.Duration
}

func (p *Dir) Run(ctx context.Context, fleet Fleet) error {
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
			if err := Engage(fleet, name, data); err != nil {
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

// Engage engages name with the current context of a kubeconfig.
func Engage(fleet Fleet, name string, kubeconfig []byte) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("member %q: the name must be a DNS label: %s", name, errs[0])
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("member %q: %w", name, err)
	}
	return fleet.Engage(name, cfg)
}
