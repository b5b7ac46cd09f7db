// Package scaffold writes a Go module to build an operator on, and adds
// kinds and webhooks to it: cmd/scaffold is its command line. What it
// writes is code a person would write, from the templates in templates/;
// then it runs what turns the types into deep copies, CRDs and manifests,
// printing each command, as a user would run them.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"unicode"
)

//go:embed templates/*.tmpl
var templates embed.FS

// ControllerGen is the controller-gen the scaffold and its Makefile run,
// the version ctrl's own build uses.
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"

// Kind names a custom resource to scaffold.
type Kind struct {
	Group      string // the API group, such as "backup.example.com"
	Version    string // such as "v1"
	Kind       string // such as "Backup"
	Namespaced bool
}

// Ctrl says how a new module requires ctrl.
type Ctrl struct {
	// Version is the version required: a release, or with Replace a
	// pseudo-version of the checkout.
	Version string
	// Replace is the directory of a checkout of ctrl that replaces the
	// module, until it is published; "" for none.
	Replace string
}

// Command is a command the scaffold runs in the module.
type Command struct {
	Dir  string
	Env  []string // added to the environment
	Args []string
	// Stdout names a file in Dir that takes the standard output, as the
	// shell's > would; "": the standard output goes to the log.
	Stdout string
}

func (c Command) String() string {
	s := strings.Join(append(slices.Clone(c.Env), c.Args...), " ")
	if c.Stdout != "" {
		s += " > " + c.Stdout
	}
	return s
}

// Runner runs commands.
type Runner func(Command) error

// Exec is the Runner that runs commands for real, printing each, and their
// output, to log.
func Exec(log io.Writer) Runner {
	return func(c Command) error {
		fmt.Fprintf(log, "$ %s\n", c)
		cmd := exec.Command(c.Args[0], c.Args[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = c.Dir, log, log
		cmd.Env = append(os.Environ(), c.Env...)
		var out bytes.Buffer
		if c.Stdout != "" {
			cmd.Stdout = &out
		}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		if c.Stdout != "" {
			return os.WriteFile(filepath.Join(c.Dir, filepath.FromSlash(c.Stdout)), out.Bytes(), 0o644)
		}
		return nil
	}
}

// data is what the templates see.
type data struct {
	Module, Name string
	Group        string
	Version      string
	Kind         string
	Lower        string // backup: the controller's name, its ConfigMaps' suffix
	Plural       string // backups: the resource
	Var          string // backup: the object in code
	VarPlural    string // backups: its client
	Alias        string // backupv1: the import name of its API package
	Article      string // a, an
	Namespaced   bool

	WebhookAddress string // the default of main's -webhook-address
}

var (
	kindPattern    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	versionPattern = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)
	groupPattern   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

func (k Kind) check() error {
	switch {
	case !kindPattern.MatchString(k.Kind):
		return fmt.Errorf("kind %q: want a Go type name in UpperCamelCase, such as Backup", k.Kind)
	case !versionPattern.MatchString(k.Version):
		return fmt.Errorf("version %q: want a Kubernetes API version, such as v1, v1alpha1 or v2beta1", k.Version)
	case !groupPattern.MatchString(k.Group):
		return fmt.Errorf("group %q: want a DNS subdomain with a dot, such as backup.example.com", k.Group)
	}
	return nil
}

// dataFor fills in the names the templates use for k in module.
func dataFor(module string, k Kind) data {
	lower := strings.ToLower(k.Kind)
	plural := Plural(lower)
	v := lowerCamel(k.Kind)
	d := data{
		Module: module, Name: projectName(module),
		Group: k.Group, Version: k.Version, Kind: k.Kind, Namespaced: k.Namespaced,
		Lower: lower, Plural: plural, Var: v, VarPlural: lowerCamel(Plural(k.Kind)),
		Alias:   strings.NewReplacer("-", "").Replace(strings.Split(k.Group, ".")[0]) + k.Version,
		Article: "a",
	}
	if strings.ContainsRune("AEIO", rune(k.Kind[0])) { // "a User", "a URL"
		d.Article = "an"
	}
	// The names must not shadow what the files use.
	taken := []string{"break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough", "for",
		"func", "go", "goto", "if", "import", "interface", "map", "package", "range", "return", "select", "struct",
		"switch", "type", "var", "api", "apierrors", "c", "changed", "cm", "configMaps", "context", "controller",
		"corev1", "ctrl", "ctrltest", "ctx", "err", "errors", "events", "fake", "field", "fmt", "key", "log", "logr",
		"maps", "message", "meta", "metav1", "mgr", "obj", "r", "rbacv1", "ready", "strings", "t", "testing", "time",
		"types", "w", "want", "waitIdle", d.Alias}
	if slices.Contains(taken, d.Var) {
		d.Var += "Obj"
	}
	if slices.Contains(taken, d.VarPlural) || d.VarPlural == d.Var {
		d.VarPlural += "Client"
	}
	return d
}

// Plural is the lower-case plural of a kind, as controller-gen makes it
// for common English words; the types say it to controller-gen
// (+kubebuilder:resource:path) so that the two never differ.
func Plural(s string) string {
	switch {
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case strings.HasSuffix(s, "y") && len(s) > 1 && !strings.ContainsRune("aeiouAEIOU", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// lowerCamel lowers the leading capitals of s: Backup → backup, URLMap →
// urlMap.
func lowerCamel(s string) string {
	r := []rune(s)
	for i := range r {
		if !unicode.IsUpper(r[i]) {
			break
		}
		if i > 0 && i+1 < len(r) && unicode.IsLower(r[i+1]) {
			break
		}
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// projectName is the name of the program's Deployment: the last element
// of the module path, as a DNS label.
func projectName(module string) string {
	name := strings.ToLower(path.Base(module))
	name = regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(name, "-")
	name = strings.Trim(name, "-")
	if name == "" {
		name = "operator"
	}
	return name
}

// files are rendered templates by path, written all at once, so that a
// template that fails leaves no file behind.
type files map[string][]byte

// render executes the template name with d as file, formatting Go source.
func (fs files) render(file, name string, d data) error {
	t, err := template.ParseFS(templates, "templates/"+name)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return err
	}
	out := b.Bytes()
	if strings.HasSuffix(file, ".go") {
		if out, err = format.Source(out); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	fs[file] = out
	return nil
}

// write writes the files into dir, none if one exists already.
func (fs files) write(dir string) error {
	for file := range fs {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(file))); err == nil {
			return fmt.Errorf("%s exists already", file)
		}
	}
	for file, data := range fs {
		p := filepath.Join(dir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Init writes a new module for k in dir, which must hold no Go module and
// nothing but dot files, then generates its deep copies, CRDs and
// manifests with run.
func Init(dir, module string, k Kind, c Ctrl, run Runner) error {
	if err := k.check(); err != nil {
		return err
	}
	if module == "" {
		return errors.New("the module path is empty")
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			return fmt.Errorf("%s holds %s: init writes a new module into an empty directory; `kind` adds a kind to a module it wrote", dir, e.Name())
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	goMod := fmt.Sprintf("module %s\n\ngo 1.26.0\n\nrequire github.com/typedctrl/ctrl %s\n", module, c.Version)
	if c.Replace != "" {
		goMod += fmt.Sprintf("\n// Until ctrl is published, the checkout it is built from.\nreplace github.com/typedctrl/ctrl => %s\n", c.Replace)
	}
	d := dataFor(module, k)
	fs := files{
		"go.mod":       []byte(goMod),
		"api/crd.yaml": nil, // controller-gen writes it; the embedding package needs it to exist
	}
	for _, f := range []struct{ file, tmpl string }{
		{"Makefile", "Makefile.tmpl"},
		{"Dockerfile", "Dockerfile.tmpl"},
		{".dockerignore", "dockerignore.tmpl"},
		{".gitignore", "gitignore.tmpl"},
		{"README.md", "README.md.tmpl"},
		{"api/crd.go", "crd.go.tmpl"},
		{"cmd/main.go", "main.go.tmpl"},
		{"cmd/manifests_test.go", "manifests_test.go.tmpl"},
		{"internal/controller/setup.go", "setup.go.tmpl"},
	} {
		if err := fs.render(f.file, f.tmpl, d); err != nil {
			return err
		}
	}
	if err := fs.write(dir); err != nil {
		return err
	}
	if err := addKind(dir, d); err != nil {
		return err
	}
	if err := run(Command{Dir: dir, Args: []string{"go", "mod", "tidy"}}); err != nil {
		return err
	}
	return generate(dir, run)
}

// AddKind adds k to the module in dir that Init wrote, then generates.
func AddKind(dir string, k Kind, run Runner) error {
	if err := k.check(); err != nil {
		return err
	}
	module, err := modulePath(dir)
	if err != nil {
		return err
	}
	if err := addKind(dir, dataFor(module, k)); err != nil {
		return err
	}
	return generate(dir, run)
}

func addKind(dir string, d data) error {
	fs := files{}
	gv := filepath.Join(dir, "api", d.Version, "groupversion.go")
	if src, err := os.ReadFile(gv); err == nil {
		if m := regexp.MustCompile(`\+groupName=(\S+)`).FindSubmatch(src); m == nil || string(m[1]) != d.Group {
			return fmt.Errorf("api/%s holds the kinds of another group than %s: this layout has one group per version", d.Version, d.Group)
		}
	} else if err := fs.render("api/"+d.Version+"/groupversion.go", "groupversion.go.tmpl", d); err != nil {
		return err
	}
	for _, f := range []struct{ file, tmpl string }{
		{"api/" + d.Version + "/" + d.Lower + "_types.go", "types.go.tmpl"},
		{"internal/controller/" + d.Lower + ".go", "controller.go.tmpl"},
		{"internal/controller/" + d.Lower + "_test.go", "controller_test.go.tmpl"},
		{"internal/controller/" + d.Lower + "_explore_test.go", "explore_test.go.tmpl"},
	} {
		if err := fs.render(f.file, f.tmpl, d); err != nil {
			return err
		}
	}
	if err := fs.write(dir); err != nil {
		return err
	}
	return addSetup(dir, "Setup"+d.Kind)
}

// setupMarker is the line of setup.go above which the setup functions go.
const setupMarker = "// +scaffold:setup"

// addSetup adds fn to the functions internal/controller's Setup runs.
func addSetup(dir, fn string) error {
	p := filepath.Join(dir, "internal", "controller", "setup.go")
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	i := bytes.Index(src, []byte(setupMarker))
	if i < 0 {
		return fmt.Errorf("internal/controller/setup.go has no line %q: add %s to what Setup runs yourself", setupMarker, fn)
	}
	line := bytes.LastIndexByte(src[:i], '\n') + 1
	indent := src[line:i]
	out := slices.Concat(src[:line], indent, []byte(fn+",\n"), src[line:])
	if out, err = format.Source(out); err != nil {
		return err
	}
	return os.WriteFile(p, out, 0o644)
}

// AddWebhook adds admission webhooks for the kind named kind (of version,
// or of its only version if empty) to the module in dir, serves them from
// cmd/main.go by default, then generates.
func AddWebhook(dir, kind, version string, run Runner) error {
	module, err := modulePath(dir)
	if err != nil {
		return err
	}
	k, err := findKind(dir, kind, version)
	if err != nil {
		return err
	}
	d := dataFor(module, k)
	fs := files{}
	for _, f := range []struct{ file, tmpl string }{
		{"internal/controller/" + d.Lower + "_webhook.go", "webhook.go.tmpl"},
		{"internal/controller/" + d.Lower + "_webhook_test.go", "webhook_test.go.tmpl"},
	} {
		if err := fs.render(f.file, f.tmpl, d); err != nil {
			return err
		}
	}
	if err := fs.write(dir); err != nil {
		return err
	}
	if err := addSetup(dir, "Setup"+d.Kind+"Webhooks"); err != nil {
		return err
	}
	// Webhooks need the server: on by default from now on.
	p := filepath.Join(dir, "cmd", "main.go")
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	off := []byte(`"webhook-address", "",`)
	if bytes.Contains(src, off) {
		if err := os.WriteFile(p, bytes.Replace(src, off, []byte(`"webhook-address", ":9443",`), 1), 0o644); err != nil {
			return err
		}
	} else if !bytes.Contains(src, []byte(`"webhook-address", ":`)) {
		return errors.New(`cmd/main.go has no -webhook-address flag with an empty default: serve the webhooks with ctrl.Options.WebhookAddress, such as ":9443", yourself`)
	}
	return generate(dir, run)
}

// findKind reads back the kind the scaffold wrote in api/<version>.
func findKind(dir, kind, version string) (Kind, error) {
	pattern := filepath.Join(dir, "api", "*", strings.ToLower(kind)+"_types.go")
	if version != "" {
		pattern = filepath.Join(dir, "api", version, strings.ToLower(kind)+"_types.go")
	}
	files, _ := filepath.Glob(pattern)
	switch len(files) {
	case 0:
		return Kind{}, fmt.Errorf("no kind %s in api/: add it with `kind` first", kind)
	case 1:
	default:
		return Kind{}, fmt.Errorf("kind %s is in several versions: say which with -version", kind)
	}
	k := Kind{Kind: kind, Version: filepath.Base(filepath.Dir(files[0]))}
	src, err := os.ReadFile(files[0])
	if err != nil {
		return k, err
	}
	if !bytes.Contains(src, []byte("type "+kind+" struct")) {
		return k, fmt.Errorf("%s does not declare type %s", files[0], kind)
	}
	k.Namespaced = !bytes.Contains(src, []byte("scope=Cluster"))
	gv, err := os.ReadFile(filepath.Join(filepath.Dir(files[0]), "groupversion.go"))
	if err != nil {
		return k, err
	}
	m := regexp.MustCompile(`\+groupName=(\S+)`).FindSubmatch(gv)
	if m == nil {
		return k, fmt.Errorf("api/%s/groupversion.go has no +groupName marker", k.Version)
	}
	k.Group = string(m[1])
	return k, k.check()
}

// generate runs what the Makefile's generate and manifests targets run.
func generate(dir string, run Runner) error {
	for _, c := range []Command{
		{Args: []string{"go", "run", ControllerGen, "object", "paths=./api/..."}},
		{Args: []string{"go", "run", ControllerGen, "crd", "paths=./api/...", "output:crd:stdout"}, Stdout: "api/crd.yaml"},
		{Env: []string{"CTRL_MANIFESTS=write"}, Args: []string{"go", "test", "./cmd", "-run", "^TestManifests$", "-count=1"}},
	} {
		c.Dir = dir
		if err := run(c); err != nil {
			return err
		}
	}
	return nil
}

// modulePath reads the module path of dir's go.mod.
func modulePath(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("%w: run it in the module the scaffold wrote", err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s has no module line", filepath.Join(dir, "go.mod"))
}
