package ctrltest

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl/internal/binaries"
	"github.com/typedctrl/ctrl/internal/binding"
)

// widgetCRD is preceded by an empty document on purpose.
const widgetCRD = `
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.ctrl.dev
spec:
  group: example.ctrl.dev
  scope: Namespaced
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
          status:
            type: object
            properties:
              ready:
                type: boolean
`

// gadgetCRD is a JSON List, to exercise the other manifest forms.
const gadgetCRD = `{"apiVersion": "v1", "kind": "List", "items": [{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "gadgets.example.ctrl.dev"},
  "spec": {
    "group": "example.ctrl.dev",
    "scope": "Cluster",
    "names": {"kind": "Gadget", "plural": "gadgets"},
    "versions": [{"name": "v1alpha1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}]}`

// Types registered for GenerateCRDs: gizmos at two versions, and widgets,
// whose CRD is widgetCRD.
type (
	gizmo struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
	}
	gizmoV2alpha1    struct{ gizmo }
	registeredWidget struct{ gizmo }
)

func (g *gizmo) DeepCopyObject() k8sruntime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	for _, info := range []binding.Info{
		{Type: reflect.TypeFor[*gizmo](), GVR: gizmoGVR, Kind: "Gizmo", Status: true},
		{Type: reflect.TypeFor[*gizmoV2alpha1](), GVR: gizmoV2GVR, Kind: "Gizmo", Status: true},
		{Type: reflect.TypeFor[*registeredWidget](), GVR: widgetGVR, Kind: "Widget", Namespaced: true},
	} {
		if err := binding.Register(info, nil); err != nil {
			panic(err)
		}
	}
}

var (
	gizmoGVR   = schema.GroupVersionResource{Group: "gen.ctrltest.dev", Version: "v1", Resource: "gizmos"}
	gizmoV2GVR = schema.GroupVersionResource{Group: "gen.ctrltest.dev", Version: "v2alpha1", Resource: "gizmos"}
	widgetGVR  = schema.GroupVersionResource{Group: "example.ctrl.dev", Version: "v1", Resource: "widgets"}
	gadgetGVR  = schema.GroupVersionResource{Group: "example.ctrl.dev", Version: "v1alpha1", Resource: "gadgets"}
)

func TestEnv(t *testing.T) {
	began := time.Now()
	env, err := New(Options{CRDs: [][]byte{[]byte(widgetCRD)}, GenerateCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ready in %s", time.Since(began).Round(time.Millisecond))
	defer env.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}

	// Typed client: create and read a ConfigMap.
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "ctrltest", Namespace: "default"},
		Data:       map[string]string{"k": "v"},
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "ctrltest", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "v" {
		t.Fatalf("ConfigMap data = %v", got.Data)
	}

	// Version stamping from ctrltest/cmd/controlplane: the release the
	// binary was built from, not always the client's (make test-skew).
	version, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	built, err := buildinfo.ReadFile(filepath.Join(env.binDir, binaries.APIServer))
	if err != nil {
		t.Fatal(err)
	}
	if want := built.Main.Version; version.GitVersion != want || !strings.HasPrefix(want, "v1.") {
		t.Errorf("server gitVersion = %q, want %q, the release of k8s.io/kubernetes it was built from", version.GitVersion, want)
	}

	// The CRD from Options is served: create a Widget and set its status.
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(widgetGVR).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.ctrl.dev/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "w1"},
		"spec":       map[string]any{"size": int64(3)},
	}}
	w, err = widgets.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(w.Object, true, "status", "ready"); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.UpdateStatus(ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// GenerateCRDs made one CRD for the two registered versions of gizmos:
	// it keeps fields no schema names, stores v1, the highest version, and
	// serves the status subresource. It left widgetCRD, which defines the
	// registered widgets, as it was.
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gen.ctrltest.dev/v2alpha1",
		"kind":       "Gizmo",
		"metadata":   map[string]any{"name": "g1"},
		"spec":       map[string]any{"free": map[string]any{"form": "kept"}},
	}}
	if _, err := dyn.Resource(gizmoV2GVR).Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gizmos := dyn.Resource(gizmoGVR)
	g, err = gizmos.Get(ctx, "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if form, _, _ := unstructured.NestedString(g.Object, "spec", "free", "form"); form != "kept" {
		t.Errorf("got gizmo spec %v, want spec.free.form kept", g.Object["spec"])
	}
	must(t, unstructured.SetNestedField(g.Object, "set", "status", "by"))
	g, err = gizmos.UpdateStatus(ctx, g, metav1.UpdateOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(g.Object, "update", "status", "by"))
	g, err = gizmos.Update(ctx, g, metav1.UpdateOptions{})
	must(t, err)
	if by, _, _ := unstructured.NestedString(g.Object, "status", "by"); by != "set" {
		t.Errorf("got status.by %q after an Update, want %q: no status subresource", by, "set")
	}
	crds := dyn.Resource(crdGVR)
	crd, err := crds.Get(ctx, "gizmos.gen.ctrltest.dev", metav1.GetOptions{})
	must(t, err)
	if stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions"); !slices.Equal(stored, []string{"v1"}) {
		t.Errorf("got stored versions %q, want [v1]", stored)
	}
	crd, err = crds.Get(ctx, "widgets.example.ctrl.dev", metav1.GetOptions{})
	must(t, err)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if _, found, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec"); !found {
		t.Errorf("the widgets CRD lost widgetCRD's schema: %v", versions[0])
	}

	// InstallCRDs on a running server, with an update of an existing CRD.
	if err := env.InstallCRDs([]byte(gadgetCRD), []byte(widgetCRD)); err != nil {
		t.Fatal(err)
	}
	gadget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.ctrl.dev/v1alpha1",
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": "g1"},
	}}
	if _, err := dyn.Resource(gadgetGVR).Create(ctx, gadget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The kubeconfig file works too.
	kcfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	kcs, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// Restart the apiserver: the same clients work again, data is kept.
	host := env.Config().Host
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err = cs.CoreV1().ConfigMaps("default").Get(short, "ctrltest", metav1.GetOptions{})
	cancelShort()
	if err == nil {
		t.Fatal("Get succeeded with the apiserver stopped")
	}
	t.Logf("Get with the apiserver stopped failed after %s: %v", time.Since(began).Round(time.Millisecond), err)
	began = time.Now()
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %s", time.Since(began).Round(time.Millisecond))
	if h := env.Config().Host; h != host {
		t.Errorf("host after restart = %s, want %s", h, host)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "ctrltest", metav1.GetOptions{}); err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	w, err = widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get Widget after restart: %v", err)
	}
	if ready, _, _ := unstructured.NestedBool(w.Object, "status", "ready"); !ready {
		t.Errorf("Widget status after restart = %v", w.Object["status"])
	}

	// Stop leaves nothing behind.
	pids := []int{env.etcd.cmd.Process.Pid, env.apiserver.cmd.Process.Pid}
	ports := []int{env.apiPort, env.etcdPort, env.etcdPeerPort}
	began = time.Now()
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	if _, err := os.Stat(env.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still there after Stop: %v", env.dir, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	for _, port := range ports {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still accepts connections after Stop", port)
		}
	}
	if err := env.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := env.StartAPIServer(); err == nil {
		t.Error("StartAPIServer after Stop succeeded")
	}
}

func TestStartRetriesOnTakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if err == nil && calls == 1 {
			ports[0] = taken.Addr().(*net.TCPAddr).Port // etcd's client port
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()

	var stderr bytes.Buffer
	env, err := New(Options{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	if calls != 2 {
		t.Errorf("picked ports %d times, want 2", calls)
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stderr got the children's output, including the first etcd's failure.
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("Stderr does not show the failed bind:\n%s", stderr.String())
	}
	// Neither the failed attempt nor the stopped environment left a
	// directory behind.
	if dirs := ownDirs(t); len(dirs) > 0 {
		t.Errorf("temporary directories left behind: %v", dirs)
	}
}

// ownDirs lists the temporary directories of this process's environments.
func ownDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), tempDirPattern))
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, dir := range dirs {
		if data, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil && string(data) == strconv.Itoa(os.Getpid()) {
			own = append(own, dir)
		}
	}
	return own
}

// crashChild makes TestCrashedTestBinary, run as a child, start a control
// plane and kill itself.
const crashChild = "CTRLTEST_CRASH_CHILD"

// TestCrashedTestBinary kills a test binary that runs a control plane with
// SIGKILL, so that no cleanup runs: its etcd and kube-apiserver must die
// with it, and the next start must remove its directory.
func TestCrashedTestBinary(t *testing.T) {
	if os.Getenv(crashChild) != "" {
		env, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(env.dir, env.etcd.cmd.Process.Pid, env.apiserver.cmd.Process.Pid)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashedTestBinary$")
	cmd.Env = append(os.Environ(), crashChild+"=1")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want killed by SIGKILL; output:\n%s", err, out)
	}
	var dir string
	var pids [2]int
	if _, err := fmt.Sscan(string(out), &dir, &pids[0], &pids[1]); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	if runtime.GOOS != "linux" {
		// Only Linux ties a child's life to its parent's.
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived the killed test binary", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed binary's directory: %v, want it left behind", err)
	}
	removeAbandonedDirs()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed binary's directory after the next start: got %v, want it removed", err)
	}
}

// running reports whether process pid exists and, where /proc tells, is
// not a zombie: an orphan whose new parent has yet to reap it is dead.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestStartWithoutBinaries(t *testing.T) {
	dir := t.TempDir()
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(tb, Options{BinDir: dir})
	}()
	<-done
	want := "ctrltest: kube-apiserver not found in " + dir + " (Options.BinDir): build it there with " +
		"`go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane -o " + dir + "`"
	if tb.fatal != want {
		t.Errorf("got Fatal(%q), want Fatal(%q)", tb.fatal, want)
	}
}

// fatalTB records the message of Fatal, which ends the calling goroutine.
type fatalTB struct {
	testing.TB
	fatal string
}

func (tb *fatalTB) Fatal(args ...any) {
	tb.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestDefaultBinDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache) // os.UserCacheDir on Linux
	t.Setenv("HOME", cache)           // and elsewhere
	userCache, err := os.UserCacheDir()
	must(t, err)
	cached := filepath.Join(userCache, "ctrl", "controlplane", "v1.37.2")
	checkout := t.TempDir()
	must(t, os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module github.com/typedctrl/ctrl // the checkout\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(checkout, "internal", "integration"), 0o755))
	elsewhere, envDir := t.TempDir(), t.TempDir()
	install := func(dir string) {
		must(t, os.MkdirAll(dir, 0o755))
		for _, name := range []string{"kube-apiserver", "etcd"} {
			must(t, os.WriteFile(filepath.Join(dir, name), nil, 0o755))
		}
	}
	command := "`go run github.com/typedctrl/ctrl/ctrltest/cmd/controlplane`"
	// A checkout a user's module replaces ctrl with: ctrltest is compiled
	// from it, whatever the working directory.
	replaced := t.TempDir()
	must(t, os.WriteFile(filepath.Join(replaced, "go.mod"), []byte("module github.com/typedctrl/ctrl\n"), 0o644))
	savedSource, savedCache := sourceFile, cacheDir
	t.Cleanup(func() { sourceFile, cacheDir = savedSource, savedCache })
	unknown := func() (string, error) { return "", errors.New("cannot tell the version of k8s.io/client-go") }
	older, newer := filepath.Join(userCache, "ctrl", "controlplane", "v1.36.9"), filepath.Join(userCache, "ctrl", "controlplane", "v1.37.10")

	tests := []struct {
		name    string
		env     string // $CTRL_CONTROLPLANE_BIN
		wd      string
		source  string // the file ctrltest is compiled from
		unknown bool   // the release of client-go cannot be told
		install []string
		want    string
		wantErr string
	}{
		{name: "nothing, outside a checkout", wd: elsewhere,
			wantErr: "ctrltest: kube-apiserver not found in " + cached + ": build it with " + command + ", run in your module, or set $CTRL_CONTROLPLANE_BIN to a directory that holds the binaries"},
		{name: "nothing, in a checkout", wd: filepath.Join(checkout, "internal", "integration"),
			wantErr: "ctrltest: kube-apiserver not found in " + filepath.Join(checkout, "bin") + ": run `make controlplane` in " + checkout + ", or set $CTRL_CONTROLPLANE_BIN to a directory that holds the binaries"},
		{name: "checkout", wd: filepath.Join(checkout, "internal", "integration"), install: []string{filepath.Join(checkout, "bin")},
			want: filepath.Join(checkout, "bin")},
		{name: "cache before checkout", wd: checkout, install: []string{cached, filepath.Join(checkout, "bin")},
			want: cached},
		{name: "variable first", env: envDir, wd: checkout, install: []string{envDir, cached},
			want: envDir},
		{name: "variable without binaries", env: envDir, wd: elsewhere, install: []string{cached},
			wantErr: "ctrltest: kube-apiserver not found in $CTRL_CONTROLPLANE_BIN (" + envDir + "): build it there with " + command + ", run in your module"},
		{name: "replaced checkout", wd: elsewhere, source: filepath.Join(replaced, "ctrltest", "bindir.go"), install: []string{filepath.Join(replaced, "bin")},
			want: filepath.Join(replaced, "bin")},
		{name: "cache before replaced checkout", wd: elsewhere, source: filepath.Join(replaced, "ctrltest", "bindir.go"),
			install: []string{cached, filepath.Join(replaced, "bin")}, want: cached},
		{name: "release unknown", wd: elsewhere, unknown: true, install: []string{older, newer}, want: newer},
		{name: "release unknown, nothing", wd: elsewhere, unknown: true,
			wantErr: "ctrltest: cannot tell the version of k8s.io/client-go: build the binaries with " + command + ", run in your module, or set $CTRL_CONTROLPLANE_BIN to their directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dir := range []string{cached, older, newer, envDir, filepath.Join(checkout, "bin"), filepath.Join(replaced, "bin")} {
				must(t, os.RemoveAll(dir))
			}
			sourceFile, cacheDir = tt.source, savedCache
			if tt.unknown {
				cacheDir = unknown
			}
			for _, dir := range tt.install {
				install(dir)
			}
			t.Setenv("CTRL_CONTROLPLANE_BIN", tt.env)
			t.Chdir(tt.wd)
			got, err := defaultBinDir()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("got %q, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseCRDs(t *testing.T) {
	crds, err := parseCRDs([][]byte{[]byte(widgetCRD), []byte(gadgetCRD)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range crds {
		names = append(names, crd.GetName())
	}
	if got := strings.Join(names, ","); got != "widgets.example.ctrl.dev,gadgets.example.ctrl.dev" {
		t.Errorf("parsed CRDs %s", got)
	}
	_, err = parseCRDs([][]byte{[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")})
	if err == nil || !strings.Contains(err.Error(), "not an apiextensions.k8s.io/v1 CustomResourceDefinition") {
		t.Errorf("parsing a ConfigMap: %v", err)
	}
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCaptureCollectsOrphans: the end state leaves out an object whose
// owners are all gone, as a cluster's garbage collector deletes it, and
// keeps one with an owner left, or with an owner of another uid gone.
func TestCaptureCollectsOrphans(t *testing.T) {
	env := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, owners ...*corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		for _, o := range owners {
			cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: o.Name, UID: o.UID})
		}
		cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	gone, kept := create("gone"), create("kept")
	create("orphan", gone)
	create("half", gone, kept)
	replaced := create("replaced")
	create("of-old", replaced)
	for _, name := range []string{"gone", "replaced"} {
		if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("replaced") // a new object of the name: not the owner
	var keys []objectKey
	for _, name := range []string{"kept", "orphan", "half", "replaced", "of-old"} {
		keys = append(keys, objectKey{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), name: name, namespaced: true})
	}
	state, err := capture(ctx, env.Config(), "default", keys)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(state))
	if want := []string{"configmaps/half", "configmaps/kept", "configmaps/replaced"}; !slices.Equal(got, want) {
		t.Errorf("captured %v, want %v", got, want)
	}
}
