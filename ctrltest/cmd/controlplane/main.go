// Command controlplane builds kube-apiserver and etcd for package ctrltest
// from the Go module proxy, at the Kubernetes release that matches the
// k8s.io/client-go of the module it runs in. Run it in your module's
// directory:
//
//	go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane
//
// It installs the binaries into $CTRL_CONTROLPLANE_BIN or, by default, into
// <user cache dir>/ctrl/controlplane/v1.X.Y (~/.cache/... on Linux,
// ~/Library/Caches/... on macOS), where ctrltest looks for them, and prints
// that directory. The first build takes several minutes, most of them
// compiling kube-apiserver; when the binaries are in place the command
// returns at once, and Go's module and build caches make a rebuild of the
// same release take seconds.
//
// `go install` cannot build kube-apiserver: k8s.io/kubernetes replaces its
// staging modules (k8s.io/api, k8s.io/client-go, ...) with directories of
// its own tree. So the command writes a tools module that requires
// k8s.io/kubernetes v1.X.Y and pins each staging module its go.mod names to
// v0.X.Y, resolves it with go mod tidy, and builds both binaries there with
// the version stamping of Kubernetes' own build. It needs the go command and
// the module proxy, nothing else.
//
// Flags:
//
//	-o dir       install into dir instead
//	-module dir  build from the tools module in dir, writing it there first
//	             if dir has no go.mod; always builds. ctrl's own
//	             `make controlplane` builds hack/controlplane this way.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/typedctrl/ctrl/internal/binaries"
)

func main() {
	out := flag.String("o", "", "install the binaries into `dir` (default: $"+binaries.BinDirEnv+", else the user cache directory)")
	module := flag.String("module", "", "build from the tools module in `dir`, written there first if it has no go.mod")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *module); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(out, module string) error {
	if out == "" {
		out = os.Getenv(binaries.BinDirEnv)
	}
	_, err := os.Stat(filepath.Join(module, "go.mod"))
	generate := module == "" || os.IsNotExist(err)
	var kube string // the release of the current module's k8s.io/client-go
	if out == "" || generate {
		if kube, err = currentRelease(); err != nil {
			return err
		}
	}
	if out == "" {
		if out, err = binaries.CacheDir(kube); err != nil {
			return err
		}
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}

	if module == "" {
		if binaries.Installed(out, kube) {
			fmt.Fprintf(os.Stderr, "controlplane: kube-apiserver and etcd %s are in place\n", kube)
			fmt.Println(out)
			return nil
		}
		tmp, err := os.MkdirTemp("", "ctrl-controlplane-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		module = tmp
	}
	if module, err = filepath.Abs(module); err != nil {
		return err
	}
	if generate {
		fmt.Fprintf(os.Stderr, "controlplane: writing the tools module of Kubernetes %s in %s\n", kube, module)
		if err := binaries.Generate(module, kube, os.Stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "controlplane: building kube-apiserver and etcd into %s (the first build takes several minutes)\n", out)
	if err := binaries.Build(module, out, os.Stderr); err != nil {
		return err
	}
	fmt.Println(out)
	return nil
}

// currentRelease returns the Kubernetes release of the k8s.io/client-go
// that the module in the working directory uses.
func currentRelease() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	clientGo, err := binaries.ClientGoVersion(wd)
	if err != nil {
		return "", fmt.Errorf("%w\nrun %s in the directory of a module that requires k8s.io/client-go, directly or through github.com/typedctrl/ctrl", err, binaries.Command)
	}
	return binaries.KubernetesVersion(clientGo)
}
