// Package provider finds the member clusters of a fleet in kubeconfig
// files: the machinery behind ctrl.KubeconfigDir and ctrl.KubeconfigSecrets.
//
// A kubeconfig can make client-go run a command (exec), call out for
// credentials (auth-provider) or read a file (tokenFile, certificates and
// keys): whoever writes one that this process loads runs code as it, or
// sends its files, such as its ServiceAccount token, to a server of theirs.
// So a kubeconfig is checked before it is used ([Check]), and honoured
// beyond inline data and tokens only from a source its caller trusts.
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
)

// Fleet is what a provider tells about member clusters.
type Fleet interface {
	Engage(name string, cfg *rest.Config) error
	Disengage(name string)
}

// NewDir returns a provider of the members whose kubeconfig files are in
// dir, read every every, honouring exec plugins, auth providers and files
// in them only if trusted; see ctrl.KubeconfigDir.
func NewDir(dir string, every time.Duration, trusted bool) *Dir {
	return &Dir{dir: dir, every: every, trusted: trusted}
}

// Dir is the provider of a directory of kubeconfig files.
type Dir struct {
	dir     string
	every   time.Duration
	trusted bool
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
			if err := Engage(fleet, name, "kubeconfig file "+filepath.Join(p.dir, e.Name()), data, p.trusted); err != nil {
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

// SecretKey is the key of a kubeconfig Secret's data that holds the kubeconfig.
const SecretKey = "kubeconfig"

// EngageSecret engages the member a kubeconfig Secret names, from its data.
func EngageSecret(fleet Fleet, namespace, name string, data map[string][]byte, trusted bool) error {
	source := fmt.Sprintf("kubeconfig Secret %s/%s, key %q", namespace, name, SecretKey)
	return Engage(fleet, name, source, data[SecretKey], trusted)
}

// Engage engages name with the current context of a kubeconfig read from
// source (a file, or a Secret and its key, for errors). Unless trusted,
// the kubeconfig must hold its credentials inline: see [Check].
func Engage(fleet Fleet, name, source string, kubeconfig []byte, trusted bool) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("member %q (%s): the name must be a DNS label: %s", name, source, errs[0])
	}
	cfg, err := Load(kubeconfig, trusted)
	if err != nil {
		return fmt.Errorf("member %q (%s): %w", name, source, err)
	}
	return fleet.Engage(name, cfg)
}
