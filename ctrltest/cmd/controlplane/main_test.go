package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/typedctrl/ctrl/internal/binaries"
)

// TestUserModule does what docs/testing.md tells a
// user to do, in a fresh module outside this checkout: it holds a copy of
// the Widget controller, with its generated files, and the guide's two
// test files, requires ctrl (replaced by this checkout), builds the
// binaries with the guide's command into an empty user cache directory,
// and runs go test, which must find them there. It needs the module proxy, or a module cache that has
// what `make controlplane` and ctrl's own build downloaded, and shares the
// Go build cache, which holds kube-apiserver after `make controlplane`.
func TestUserModule(t *testing.T) {
	root, err := filepath.Abs("../../..")
	must(t, err)
	tmp := t.TempDir()
	module := filepath.Join(tmp, "widget")
	must(t, os.Mkdir(module, 0o755))

	// An empty user cache and home; the Go caches and settings stay.
	env := []string{"GOWORK=off", "XDG_CACHE_HOME=" + filepath.Join(tmp, "cache"), "HOME=" + filepath.Join(tmp, "home")}
	var goEnv map[string]string
	must(t, json.Unmarshal(command(t, root, nil, "go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"), &goEnv))
	for k, v := range goEnv {
		env = append(env, k+"="+v)
	}

	goMod := "module example.com/widget\n\ngo 1.26.0\n\nrequire github.com/typedctrl/ctrl v0.0.0\n\nreplace github.com/typedctrl/ctrl => " + root + "\n"
	must(t, os.WriteFile(filepath.Join(module, "go.mod"), []byte(goMod), 0o644))
	for _, name := range []string{"go.sum", "examples/widget/widget.go", "examples/widget/types.go", "examples/widget/zz_generated.deepcopy.go", "examples/widget/crd.yaml", "examples/widget/fake_test.go", "examples/widget/apiserver_test.go", "examples/widget/explore_test.go"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		must(t, err)
		if strings.HasSuffix(name, "_test.go") {
			// The package's path in the user's module.
			const path = `"github.com/typedctrl/ctrl/examples/widget"`
			if n := bytes.Count(data, []byte(path)); n != 1 {
				t.Fatalf("%s imports %s %d times, want once", name, path, n)
			}
			data = bytes.ReplaceAll(data, []byte(path), []byte(`"example.com/widget"`))
		}
		must(t, os.WriteFile(filepath.Join(module, filepath.Base(name)), data, 0o644))
	}
	command(t, module, env, "go", "mod", "tidy")

	documented := strings.Fields(binaries.Command) // docs/testing.md shows it (examples/widget's TestReadmeTesting)
	began := time.Now()
	out := command(t, module, env, documented...)
	t.Logf("%s: %s", binaries.Command, time.Since(began).Round(100*time.Millisecond))
	clientGo, err := binaries.ClientGoVersion(module)
	must(t, err)
	kube, err := binaries.KubernetesVersion(clientGo)
	must(t, err)
	want := filepath.Join(tmp, "cache", "ctrl", "controlplane", kube)
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("got directory %q, want %q", got, want)
	}
	began = time.Now()
	command(t, module, env, documented...)
	t.Logf("again, with the binaries in place: %s", time.Since(began).Round(100*time.Millisecond))

	began = time.Now()
	out = command(t, module, env, "go", "test", "-race", "-short", "-count=1", "-v", ".")
	t.Logf("go test: %s", time.Since(began).Round(100*time.Millisecond))
	for _, test := range []string{"TestWidgetGetsConfigMap", "TestWidgetLifecycle", "TestWidgetPlans"} {
		if !strings.Contains(string(out), "--- PASS: "+test+" ") {
			t.Errorf("go test did not run %s:\n%s", test, out)
		}
	}
}

// command runs a command in dir with env added to the environment, less
// $CTRL_CONTROLPLANE_BIN, and returns its standard output. It fails the
// test if the command fails.
func command(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, binaries.BinDirEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s%s", strings.Join(args, " "), dir, err, out, stderr.Bytes())
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
