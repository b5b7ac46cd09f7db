package binaries

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ModulePath is the module path of the tools module, hack/controlplane's,
// whichever release it is generated for. The same path keeps etcd's build
// identical to the one from hack/controlplane, so the build cache serves it.
const ModulePath = "github.com/typedctrl/ctrl/hack/controlplane"

// EtcdMain is etcd/main.go of the tools module.
const EtcdMain = `// Command etcd is the etcd server used by the test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
`

// replaceComment precedes the replace block of the tools module's go.mod.
const replaceComment = `// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
// with local directories; outside its own tree they must be pinned to the
// published versions that match the release.
`

// ClientGoVersion returns the version of k8s.io/client-go in the build list
// of the module in dir.
func ClientGoVersion(dir string) (string, error) {
	out, err := goCommand(dir, nil, nil, "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go")
	if err != nil {
		return "", fmt.Errorf("reading the version of k8s.io/client-go in the module in %s: %w", dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Generate writes the tools module of Kubernetes release kube into dir
// (go.mod, go.sum and etcd/main.go) and resolves it through the module
// proxy. It reads the release's go.mod for the staging modules to pin and
// for the version of etcd to build, and writes nothing else by hand. The go
// command's output goes to log.
func Generate(dir, kube string, log io.Writer) error {
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o755); err != nil {
		return err
	}
	// A go.mod of its own first, so that the download below does not touch
	// a module around dir.
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+ModulePath+"\n"), 0o644); err != nil {
		return err
	}
	out, err := goCommand(dir, toolsEnv, log, "mod", "download", "-json", "k8s.io/kubernetes@"+kube)
	if err != nil {
		return fmt.Errorf("downloading k8s.io/kubernetes %s: %w", kube, err)
	}
	var mod struct{ GoMod string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", kube, err)
	}
	kubeGoMod, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return err
	}
	goMod, err := toolsGoMod(kube, kubeGoMod)
	if err != nil {
		return fmt.Errorf("k8s.io/kubernetes %s: %w", kube, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), goMod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd", "main.go"), []byte(EtcdMain), 0o644); err != nil {
		return err
	}
	if _, err := goCommand(dir, toolsEnv, log, "mod", "tidy"); err != nil {
		return fmt.Errorf("resolving the tools module in %s: %w", dir, err)
	}
	return nil
}

// toolsGoMod returns the go.mod of the tools module of release kube, whose
// own go.mod is kubeGoMod, before go mod tidy completes it.
func toolsGoMod(kube string, kubeGoMod []byte) ([]byte, error) {
	var goVersion, etcd string
	var staging []string
	block := "" // the directive of the block being read
	for line := range strings.Lines(string(kubeGoMod)) {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		directive := block
		switch {
		case fields[0] == ")":
			block = ""
			continue
		case block == "" && len(fields) == 2 && fields[1] == "(":
			block = fields[0]
			continue
		case block == "":
			directive, fields = fields[0], fields[1:]
		}
		switch {
		case directive == "go" && len(fields) == 1:
			goVersion = fields[0]
		case directive == "require" && len(fields) == 2 && fields[0] == "go.etcd.io/etcd/server/v3":
			etcd = fields[1]
		case directive == "replace" && len(fields) == 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "./staging/"):
			staging = append(staging, fields[0])
		}
	}
	switch {
	case goVersion == "":
		return nil, fmt.Errorf("its go.mod has no go directive")
	case etcd == "":
		return nil, fmt.Errorf("its go.mod does not require go.etcd.io/etcd/server/v3")
	case len(staging) == 0:
		return nil, fmt.Errorf("its go.mod replaces no staging module")
	}
	staged := "v0." + strings.TrimPrefix(kube, "v1.")
	var b bytes.Buffer
	fmt.Fprintf(&b, "module %s\n\ngo %s\n\ntool k8s.io/kubernetes/cmd/kube-apiserver\n\n", ModulePath, goVersion)
	fmt.Fprintf(&b, "require (\n\tgo.etcd.io/etcd/server/v3 %s\n\tk8s.io/kubernetes %s\n)\n\n", etcd, kube)
	b.WriteString(replaceComment)
	b.WriteString("replace (\n")
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, staged)
	}
	b.WriteString(")\n")
	return b.Bytes(), nil
}

// Build builds kube-apiserver and etcd from the tools module in module into
// out, stamped with the release's version as Kubernetes' own build stamps
// them, so that /version reports it. Both are built before either replaces
// its predecessor in out, each with a rename, so an interrupted build leaves
// out as it was. The go command's output goes to log.
func Build(module, out string, log io.Writer) error {
	info, err := goCommand(module, toolsEnv, log, "list", "-m", "-json", "k8s.io/kubernetes")
	if err != nil {
		return fmt.Errorf("reading the k8s.io/kubernetes version of the tools module in %s: %w", module, err)
	}
	var kube struct {
		Version string
		Time    time.Time
	}
	if err := json.Unmarshal(info, &kube); err != nil {
		return fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_, err = goCommand(module, []string{"GOWORK=off", "CGO_ENABLED=0"}, log, "build",
		// Without VCS stamping and with -trimpath, neither the surrounding
		// checkout nor the module's directory changes the build, so an
		// unchanged module is served from the build cache.
		"-trimpath", "-buildvcs=false",
		"-ldflags", versionFlags(kube.Version, kube.Time),
		"-o", tmp+string(filepath.Separator),
		"./etcd", "k8s.io/kubernetes/cmd/kube-apiserver")
	if err != nil {
		return fmt.Errorf("building kube-apiserver and etcd %s: %w", kube.Version, err)
	}
	for _, name := range []string{Etcd, APIServer} {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(out, name)); err != nil {
			return err
		}
	}
	return nil
}

// versionFlags returns the linker flags that stamp the binaries with release
// kube, as Kubernetes' hack/lib/version.sh does. The build date is the
// release's module timestamp, so that the flags, and with them the link,
// stay the same from one build to the next. The module proxy does not carry
// the release's commit.
func versionFlags(kube string, released time.Time) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(kube, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+kube,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitCommit=",
			"-X", pkg+".gitTreeState=clean",
			"-X", pkg+".buildDate="+released.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return strings.Join(flags, " ")
}

// Installed reports whether dir holds both binaries, kube-apiserver built
// from release kube.
func Installed(dir, kube string) bool {
	if Missing(dir) != "" {
		return false
	}
	info, err := buildinfo.ReadFile(filepath.Join(dir, APIServer))
	return err == nil && info.Main.Path == "k8s.io/kubernetes" && info.Main.Version == kube
}

// toolsEnv is the environment of go commands in the tools module: a go.work
// around it must not pull it into someone else's workspace.
var toolsEnv = []string{"GOWORK=off"}

// goCommand runs the go command in dir with env added to the environment,
// and returns its standard output. Its standard error goes to log, or, when
// log is nil, into the error.
func goCommand(dir string, env []string, log io.Writer, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if log != nil {
		cmd.Stderr = log
	}
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, msg)
		}
		return nil, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}
