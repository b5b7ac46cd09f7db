package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestObjectName(t *testing.T) {
	for msg, want := range map[string]string{
		"Cause.Reason: removed":                              "Cause.Reason",
		"(*Cache[T]).Get: changed from func(Key) to func()":  "Cache.Get",
		"(*Manager).Engage: changed from func(string, ...)":  "Manager.Engage",
		"Provider.Run: changed from func(context.Context)":   "Provider.Run",
		"Env.Config: removed":                                "Env.Config",
		"ReasonTriggered: value changed from \"a\" to \"b\"": "ReasonTriggered",
	} {
		if got := objectName(msg); got != want {
			t.Errorf("objectName(%q): got %q, want %q", msg, got, want)
		}
	}
}

func TestBreakingNames(t *testing.T) {
	changelog := "# Changelog\n\n" +
		"- **Breaking:** `Above` the Unreleased section.\n\n" +
		"## [Unreleased]\n\n### Changed\n\n" +
		"- **Breaking:** `Default` is `ctrl.Mutate`; `Cause.Reason`\n" +
		"  is `Cause.Trigger` (continued: `ctrltest.Options.BinDir`).\n" +
		"- `NotBreaking` changed.\n" +
		"  `StillNotBreaking`\n\n" +
		"### Removed\n\n" +
		"- **Breaking:** `Gone(ctx)`, `(*Manager).Old` and `(*Cache[T]).Get`.\n\n" +
		"Not an entry: `Paragraph`.\n\n" +
		"## [0.4.0] - 2026-12-05\n\n" +
		"- **Breaking:** `Released`.\n"
	got, err := breakingNames([]byte(changelog))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Cache.Get", "Cause.Reason", "Cause.Trigger", "Default", "Gone", "Manager.Old", "ctrl.Mutate", "ctrltest.Options.BinDir", "ctx"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Errorf("got %q, want %q", names, want)
	}
	if _, err := breakingNames([]byte("# Changelog\n\n## [0.1.0]\n")); err == nil {
		t.Error("a changelog without Unreleased: got no error")
	}
}

// TestGate drives the gate through a module of two packages in a git
// repository of its own: a change that breaks the release's API fails
// until an Unreleased entry marked Breaking names it, in a subpackage with
// its qualifier.
func TestGate(t *testing.T) {
	repo := t.TempDir()
	write(t, repo, map[string]string{
		"go.mod":       "module example.com/m\n\ngo 1.26.0\n",
		"m.go":         "package m\n\nfunc Hello() string { return \"hello\" }\n\ntype Options struct{ Name string }\n",
		"sub/sub.go":   "package sub\n\ntype Options struct{ Dir string }\n",
		"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n## [0.1.0]\n",
	})
	git(t, repo, "init", "-q")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "release")
	release := strings.TrimSpace(git(t, repo, "rev-parse", "HEAD"))
	pkgs := []pkg{{dir: ".", qualifier: "m", bare: true}, {dir: "./sub", qualifier: "sub"}}

	check := func(changelog string, want ...string) {
		t.Helper()
		write(t, repo, map[string]string{"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n" + changelog + "\n## [0.1.0]\n"})
		var out bytes.Buffer
		unnamed, err := run(repo, repo, release, pkgs, false, &out)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range unnamed {
			got = append(got, c.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("changelog %q: got unnamed %q, want %q\n%s", changelog, got, want, &out)
		}
	}

	check("") // the release itself
	write(t, repo, map[string]string{
		"m.go":       "package m\n\nfunc Hello(name string) string { return name }\n\ntype Options struct{ Name string; Added int }\n\nfunc New() {}\n",
		"sub/sub.go": "package sub\n\ntype Options struct{}\n",
	})
	helloChanged := "m: Hello: changed from func() string to func(string) string"
	dirRemoved := "sub: Options.Dir: removed"
	check("", helloChanged, dirRemoved)
	check("- `Hello` takes a name: not marked Breaking.\n", helloChanged, dirRemoved)
	check("- **Breaking:** `Hello` takes a name. Migrate: `Hello()` → `Hello(\"hello\")`.\n", dirRemoved)
	check("- **Breaking:** `Hello` takes a name, `Options.Dir` is gone.\n", dirRemoved) // m's Options, not sub's
	check("- **Breaking:** `m.Hello` takes a name.\n- **Breaking:** `sub.Options.Dir` is gone.\n")
}

// TestGateOnCtrl plants an incompatible change in a copy of this checkout:
// the gate fails on it, naming it, until CHANGELOG.md's Unreleased section
// names it, and reports nothing else differently.
func TestGateOnCtrl(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	files := map[string]string{}
	for _, name := range strings.Fields(git(t, root, "ls-files", "-co", "--exclude-standard", "*.go", "go.mod", "go.sum", "CHANGELOG.md", "hack/apicheck/baseline")) {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil && !os.IsNotExist(err) { // a deletion not committed yet
			t.Fatal(err)
		}
		files[name] = string(data)
	}
	const def, planted = "func SignalContext(", "func signalContext("
	if strings.Count(files["signal.go"], def) != 1 {
		t.Fatalf("signal.go does not declare SignalContext once: plant another change")
	}
	files["signal.go"] = strings.Replace(files["signal.go"], def, planted, 1)
	write(t, tree, files)

	gate := func() []string {
		t.Helper()
		var out bytes.Buffer
		unnamed, err := run(tree, root, "", checked, false, &out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", &out)
		var got []string
		for _, c := range unnamed {
			got = append(got, c.String())
		}
		return got
	}
	without := gate()
	const removed = "ctrl: SignalContext: removed"
	if !slices.Contains(without, removed) {
		t.Fatalf("without a changelog line: got unnamed %q, want %q among them", without, removed)
	}
	changelog := strings.Replace(files["CHANGELOG.md"], "## [Unreleased]\n",
		"## [Unreleased]\n\n- **Breaking:** `SignalContext` is gone. Migrate: `signal.NotifyContext`.\n", 1)
	write(t, tree, map[string]string{"CHANGELOG.md": changelog})
	with := gate()
	if want := slices.DeleteFunc(slices.Clone(without), func(s string) bool { return s == removed }); !slices.Equal(with, want) {
		t.Errorf("with a changelog line: got unnamed %q, want %q", with, want)
	}
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=apicheck", "-c", "user.email=apicheck@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
