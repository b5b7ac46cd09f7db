package ctrltest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/binaries"
)

// ctrlModule is the module whose checkouts keep the binaries in bin/.
const ctrlModule = "github.com/typedctrl/ctrl"

// defaultBinDir returns the directory of the binaries when Options.BinDir
// is empty: $CTRL_CONTROLPLANE_BIN; else the directory the controlplane
// command fills for the release of this binary's k8s.io/client-go, if it
// holds both binaries; else the bin directory of a checkout of ctrl that
// `make controlplane` filled: the one this package was compiled from (a
// replace directive may point a module at it), or the one that holds the
// working directory; else, when the release cannot be told, the newest
// release the command built. Its error says which command builds them.
func defaultBinDir() (string, error) {
	if dir := os.Getenv(binaries.BinDirEnv); dir != "" {
		if missing := binaries.Missing(dir); missing != "" {
			return "", fmt.Errorf("ctrltest: %s not found in $%s (%s): build it there with `%s`, run in your module",
				missing, binaries.BinDirEnv, dir, binaries.Command)
		}
		return dir, nil
	}
	cache, cacheErr := cacheDir()
	if cacheErr == nil && binaries.Missing(cache) == "" {
		return cache, nil
	}
	for _, root := range []string{sourceCheckout(), checkoutRoot()} {
		if bin := filepath.Join(root, "bin"); root != "" && binaries.Missing(bin) == "" {
			return bin, nil
		}
	}
	if cacheErr != nil {
		if dir := newestCached(); dir != "" {
			return dir, nil
		}
		return "", fmt.Errorf("ctrltest: %w: build the binaries with `%s`, run in your module, or set $%s to their directory",
			cacheErr, binaries.Command, binaries.BinDirEnv)
	}
	if root := checkoutRoot(); root != "" {
		bin := filepath.Join(root, "bin")
		return "", fmt.Errorf("ctrltest: %s not found in %s: run `make controlplane` in %s, or set $%s to a directory that holds the binaries",
			binaries.Missing(bin), bin, root, binaries.BinDirEnv)
	}
	return "", fmt.Errorf("ctrltest: %s not found in %s: build it with `%s`, run in your module, or set $%s to a directory that holds the binaries",
		binaries.Missing(cache), cache, binaries.Command, binaries.BinDirEnv)
}

// sourceFile is the path this file was compiled from: absolute, unless
// the build trimmed paths.
var sourceFile = func() string {
	_, file, _, _ := runtime.Caller(0)
	return file
}()

// sourceCheckout returns the root of the checkout of ctrl this package was
// compiled from, or "" (a module cache's copy is one too, without a bin
// directory).
func sourceCheckout() string {
	if !filepath.IsAbs(sourceFile) {
		return ""
	}
	root := filepath.Dir(filepath.Dir(sourceFile))
	if modulePath(filepath.Join(root, "go.mod")) != ctrlModule {
		return ""
	}
	return root
}

// newestCached returns the directory of the newest release the
// controlplane command installed in the user cache directory, or "".
func newestCached() string {
	dir, err := binaries.CacheDir("")
	if err != nil {
		return ""
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var newest *utilversion.Version
	found := ""
	for _, e := range entries {
		v, err := utilversion.ParseGeneric(e.Name())
		if err != nil || !e.IsDir() || binaries.Missing(filepath.Join(dir, e.Name())) != "" {
			continue
		}
		if newest == nil || v.GreaterThan(newest) {
			newest, found = v, filepath.Join(dir, e.Name())
		}
	}
	return found
}

// cacheDir returns the directory the controlplane command fills for the
// release of the k8s.io/client-go linked into this binary.
var cacheDir = func() (string, error) {
	clientGo, err := clientGoVersion()
	if err != nil {
		return "", err
	}
	kube, err := binaries.KubernetesVersion(clientGo)
	if err != nil {
		return "", err
	}
	return binaries.CacheDir(kube)
}

// clientGoVersion returns the version of the k8s.io/client-go module linked
// into this binary. A program's build information lists it, but go test
// leaves the dependencies out of a test binary's; there the name of a
// source file compiled into client-go tells it: it lies in the module
// cache's directory k8s.io/client-go@v0.X.Y, under -trimpath too.
func clientGoVersion() (string, error) {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/client-go" {
				return dep.Version, nil
			}
		}
	}
	fn := runtime.FuncForPC(reflect.ValueOf(rest.CopyConfig).Pointer())
	file, _ := fn.FileLine(fn.Entry())
	const dir = "k8s.io/client-go@"
	if _, after, ok := strings.Cut(filepath.ToSlash(file), dir); ok {
		if version, _, ok := strings.Cut(after, "/"); ok {
			return version, nil
		}
	}
	return "", fmt.Errorf("cannot tell the version of k8s.io/client-go: it is compiled from %s, not from the module cache", file)
}

// checkoutRoot returns the root of the checkout of ctrl that holds the
// working directory, or "".
func checkoutRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if modulePath(filepath.Join(dir, "go.mod")) == ctrlModule {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// modulePath returns the module path declared in the go.mod file at path,
// or "" if there is none.
func modulePath(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`")
		}
	}
	return ""
}
