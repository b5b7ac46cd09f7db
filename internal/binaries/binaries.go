// Package binaries builds kube-apiserver and etcd from the Go module
// proxy and says where package ctrltest finds them. It needs nothing but the
// standard library and the go command, so that `go run` of its command,
// ctrltest/cmd/controlplane, compiles in a second in any module that
// requires ctrl.
//
// k8s.io/kubernetes cannot be built with `go install`: it requires its
// staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces
// them with directories of its own tree. A tools module that requires it
// and replaces each staging module with its published v0.X.Y builds it, and
// hack/controlplane is that module for the release ctrl is built with.
// [Generate] writes the same module for any release, from the release's own
// go.mod, so the list of staging modules is never written down by hand.
package binaries

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that overrides where the
// binaries are installed and looked for.
const BinDirEnv = "CTRL_CONTROLPLANE_BIN"

// Command is what a user runs in their module to build the binaries.
const Command = "go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane"

// The binaries' file names.
const (
	APIServer = "kube-apiserver"
	Etcd      = "etcd"
)

// KubernetesVersion returns the Kubernetes release that publishes its
// staging modules, such as k8s.io/client-go, at version clientGo: v1.37.2
// for v0.37.2.
func KubernetesVersion(clientGo string) (string, error) {
	rest, ok := strings.CutPrefix(clientGo, "v0.")
	if !ok || rest == "" {
		return "", fmt.Errorf("k8s.io/client-go %q is not a release of the form v0.X.Y", clientGo)
	}
	return "v1." + rest, nil
}

// CacheDir returns the directory that holds the binaries of release kube by
// default: <user cache dir>/ctrl/controlplane/<kube>, such as
// ~/.cache/ctrl/controlplane/v1.37.2 on Linux.
func CacheDir(kube string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	return filepath.Join(cache, "ctrl", "controlplane", kube), nil
}

// Missing returns the first of the binaries that dir lacks, or "" when it
// holds both.
func Missing(dir string) string {
	for _, name := range []string{APIServer, Etcd} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.IsDir() {
			return name
		}
	}
	return ""
}
