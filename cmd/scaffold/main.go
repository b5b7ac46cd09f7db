// Command scaffold writes a Go module to build a Kubernetes operator on with
// ctrl, and adds kinds and webhooks to it. In an empty directory:
//
//	go run github.com/typedctrl/ctrl/cmd/scaffold@latest init -group backup.example.com -kind Backup
//
// writes, for the kind Backup of backup.example.com/v1: its types with
// their markers (api/v1), a controller with tests on client-go's fakes, on
// a real API server and with ctrltest.Explore (internal/controller), a
// production cmd/main.go, a Makefile and a Dockerfile; then it runs
// controller-gen for the deep copies and the CRD (api/crd.yaml) and writes
// the manifests (config/), printing each command. In that module:
//
//	go run github.com/typedctrl/ctrl/cmd/scaffold kind -group backup.example.com -kind Schedule
//	go run github.com/typedctrl/ctrl/cmd/scaffold webhook -kind Backup
//
// add a kind, and a defaulting and validating webhook for a kind.
//
// From a checkout of ctrl, before a release of it holds this command, run
// it there with -C and name the directory:
//
//	go run -C ~/src/ctrl ./cmd/scaffold init -dir "$PWD" -group backup.example.com -kind Backup
//
// The module then requires ctrl at a pseudo-version of the checkout's
// commit and replaces it with the checkout (-ctrl says otherwise).
//
// Flags of init and kind:
//
//	-dir dir        the module's directory (default: the working directory)
//	-module path    the module path (init; default: the directory's name)
//	-group group    the API group, a DNS subdomain: backup.example.com
//	-version v      the API version (default: v1)
//	-kind Kind      the kind, a Go type name: Backup
//	-cluster-scoped a cluster-scoped kind (default: namespaced)
//	-ctrl v|dir     the ctrl to require (init): a version, or a checkout's
//	                directory to replace it with (default: this command's)
//
// Flags of webhook: -dir, -kind, and -version if the kind has several.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/typedctrl/ctrl/internal/scaffold"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "scaffold:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: scaffold init    -group group -kind Kind [-version v1] [-cluster-scoped] [-module path] [-dir dir] [-ctrl version|dir]
       scaffold kind    -group group -kind Kind [-version v1] [-cluster-scoped] [-dir dir]
       scaffold webhook -kind Kind [-version v] [-dir dir]`)
	os.Exit(2)
}

func run(command string, args []string) error {
	fs := flag.NewFlagSet(command, flag.ExitOnError)
	dir := fs.String("dir", ".", "the module's `directory`")
	var k scaffold.Kind
	fs.StringVar(&k.Kind, "kind", "", "the `Kind`, a Go type name such as Backup")
	fs.StringVar(&k.Version, "version", "", "the API `version` (default: v1; for webhook, the kind's only one)")
	var module, ctrlDep string
	var cluster bool
	if command != "webhook" {
		fs.StringVar(&k.Group, "group", "", "the API `group`, such as backup.example.com")
		fs.BoolVar(&cluster, "cluster-scoped", false, "a cluster-scoped kind")
	}
	if command == "init" {
		fs.StringVar(&module, "module", "", "the module `path` (default: the directory's name)")
		fs.StringVar(&ctrlDep, "ctrl", "", "the ctrl to require: a `version`, or the directory of a checkout to replace it with (default: this command's)")
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", command, fs.Args())
	}
	k.Namespaced = !cluster
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	began := time.Now()
	runner := scaffold.Exec(os.Stdout)
	switch command {
	case "init":
		k.Version = cmp.Or(k.Version, "v1")
		dep, err := ctrlRequirement(ctrlDep)
		if err != nil {
			return err
		}
		if err := scaffold.Init(abs, cmp.Or(module, filepath.Base(abs)), k, dep, runner); err != nil {
			return err
		}
		fmt.Printf("\nWrote the module in %s (%s). Next: make test; make manifests; make help.\n", abs, time.Since(began).Round(time.Second))
	case "kind":
		k.Version = cmp.Or(k.Version, "v1")
		if err := scaffold.AddKind(abs, k, runner); err != nil {
			return err
		}
		fmt.Printf("\nAdded %s (%s). internal/controller/setup.go wires it; config/ has its CRD and rules.\n", k.Kind, time.Since(began).Round(time.Second))
	case "webhook":
		if err := scaffold.AddWebhook(abs, k.Kind, k.Version, runner); err != nil {
			return err
		}
		fmt.Printf("\nAdded the webhooks of %s (%s); cmd/main.go serves them on :9443, config/webhook and config/certmanager tell the API server.\n", k.Kind, time.Since(began).Round(time.Second))
	default:
		usage()
	}
	return nil
}

// ctrlRequirement says how the new module requires ctrl: as -ctrl says, a
// version or a checkout's directory; else at this command's release; else,
// run from a checkout, at a pseudo-version of its commit, replaced by it.
func ctrlRequirement(flag string) (scaffold.Ctrl, error) {
	if flag != "" {
		if fi, err := os.Stat(flag); err != nil || !fi.IsDir() {
			return scaffold.Ctrl{Version: flag}, nil
		}
		abs, err := filepath.Abs(flag)
		if err != nil {
			return scaffold.Ctrl{}, err
		}
		if !isCheckout(abs) {
			return scaffold.Ctrl{}, fmt.Errorf("-ctrl %s: not a checkout of github.com/typedctrl/ctrl", flag)
		}
		return scaffold.Ctrl{Version: pseudoVersion(abs), Replace: abs}, nil
	}
	if root := sourceCheckout(); root != "" {
		return scaffold.Ctrl{Version: pseudoVersion(root), Replace: root}, nil
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Path == "github.com/typedctrl/ctrl" && strings.HasPrefix(info.Main.Version, "v") {
		return scaffold.Ctrl{Version: info.Main.Version}, nil
	}
	return scaffold.Ctrl{}, errors.New("cannot tell which ctrl to require: run it as go run github.com/typedctrl/ctrl/cmd/scaffold@<version>, or set -ctrl")
}

// sourceCheckout returns the root of the checkout of ctrl this command is
// compiled from, or "" (a module cache's copy is not one: its directory
// names its version, ctrl@v...).
func sourceCheckout() string {
	_, file, _, _ := runtime.Caller(0)
	if !filepath.IsAbs(file) {
		return ""
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	if strings.Contains(filepath.Base(root), "@") || !isCheckout(root) {
		return ""
	}
	return root
}

func isCheckout(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.HasPrefix(string(data), "module github.com/typedctrl/ctrl\n")
}

// pseudoVersion names the checkout's commit as Go names an untagged one,
// v0.0.0-<commit time, UTC>-<12 hex digits>, or the zero pseudo-version
// without git. A replace makes the go command take the checkout whatever
// the version; a real one keeps go.mod meaningful once ctrl is published.
func pseudoVersion(dir string) string {
	out, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%H %ct").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) == 2 && len(f[0]) >= 12 {
		var secs int64
		if _, err := fmt.Sscan(f[1], &secs); err == nil {
			return "v0.0.0-" + time.Unix(secs, 0).UTC().Format("20060102150405") + "-" + f[0][:12]
		}
	}
	return "v0.0.0-00010101000000-000000000000"
}
