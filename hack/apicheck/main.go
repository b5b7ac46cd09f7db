// Command apicheck is ctrl's API-compatibility gate: it compares the
// exported API of ctrl's packages with the last release and fails when a
// change would break a program written against that release and the
// Unreleased section of CHANGELOG.md does not name it. `make check` runs
// it from the repository's root:
//
//	go run -C hack/apicheck . -root ../..
//
// The last release is the git revision in the file baseline beside this
// one: a commit until ctrl has tags, then the newest release's tag.
// golang.org/x/exp/apidiff decides what is incompatible: a removed name, a
// changed type or signature, a method added to an interface, a changed
// constant, and so on. A change is named when an entry of Unreleased that
// begins "- **Breaking:**" holds the name apidiff reports, in backquotes:
// `Mutate`, `Cause.Trigger` or `Manager.Engage` for package ctrl (which may
// also be written `ctrl.Mutate`), and `ctrltest.Options.BinDir` for
// package ctrltest.
//
// Flags:
//
//	-root dir       the checkout to check (default: the working directory)
//	-baseline rev   the revision to compare with (default: the file baseline)
//	-v              list the compatible changes too
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

// checked lists the packages whose API is compared, relative to the
// module's root, with the qualifier their names take in CHANGELOG.md.
var checked = []pkg{{dir: ".", qualifier: "ctrl", bare: true}, {dir: "./ctrltest", qualifier: "ctrltest"}}

type pkg struct {
	dir       string
	qualifier string // the package's name, as a changelog writes it before a name
	bare      bool   // a name may also stand without the qualifier
}

func main() {
	root := flag.String("root", ".", "the checkout to check")
	baseline := flag.String("baseline", "", "the git `revision` of the last release (default: the file hack/apicheck/baseline)")
	verbose := flag.Bool("v", false, "list the compatible changes too")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	unnamed, err := run(*root, *root, *baseline, checked, *verbose, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
	if len(unnamed) > 0 {
		os.Exit(1)
	}
}

// run compares the packages of the module in tree with those of revision
// baseline of the git repository in repo (when empty, the revision in
// tree's hack/apicheck/baseline), reports to out, and returns the
// incompatible changes that tree's CHANGELOG.md does not name.
func run(tree, repo, baseline string, pkgs []pkg, verbose bool, out io.Writer) ([]Change, error) {
	tree, err := filepath.Abs(tree)
	if err != nil {
		return nil, err
	}
	if baseline == "" {
		if baseline, err = readBaseline(filepath.Join(tree, "hack", "apicheck", "baseline")); err != nil {
			return nil, err
		}
	}
	changelog, err := os.ReadFile(filepath.Join(tree, "CHANGELOG.md"))
	if err != nil {
		return nil, err
	}
	named, err := breakingNames(changelog)
	if err != nil {
		return nil, err
	}
	old, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(old)
	if err := extract(repo, baseline, old); err != nil {
		return nil, err
	}
	oldPkgs, err := load(old, pkgs)
	if err != nil {
		return nil, fmt.Errorf("the baseline %s: %w", baseline, err)
	}
	newPkgs, err := load(tree, pkgs)
	if err != nil {
		return nil, err
	}
	changes := diff(pkgs, oldPkgs, newPkgs)
	var unnamed []Change
	for _, c := range changes {
		switch {
		case c.Compatible:
			if verbose {
				fmt.Fprintf(out, "compatible: %s\n", c)
			}
		case c.namedIn(named):
			fmt.Fprintf(out, "incompatible, in CHANGELOG.md: %s\n", c)
		default:
			unnamed = append(unnamed, c)
		}
	}
	if len(unnamed) > 0 {
		fmt.Fprintf(out, "Incompatible with the last release (%s), and not named in CHANGELOG.md's Unreleased section:\n", baseline)
		for _, c := range unnamed {
			fmt.Fprintf(out, "\t%s\n", c)
		}
		fmt.Fprintf(out, "Add an entry under \"## [Unreleased]\" that begins \"- **Breaking:**\", names each in backquotes (such as `%s`), and says in one line how to migrate.\n", unnamed[0].Name)
	}
	return unnamed, nil
}

// A Change is one change apidiff reports in one package.
type Change struct {
	Pkg        pkg
	Name       string // the object changed, as apidiff names it less receivers' stars and type parameters: "Manager.Engage"
	Message    string // apidiff's message
	Compatible bool
}

func (c Change) String() string { return c.Pkg.qualifier + ": " + c.Message }

// namedIn reports whether names holds c's name, as its package's changelog
// entries may write it.
func (c Change) namedIn(names map[string]bool) bool {
	return names[c.Pkg.qualifier+"."+c.Name] || c.Pkg.bare && names[c.Name]
}

// diff returns apidiff's changes of each package, sorted as apidiff sorts
// them within one package.
func diff(pkgs []pkg, old, new map[string]*types.Package) []Change {
	var changes []Change
	for _, p := range pkgs {
		for _, c := range apidiff.Changes(old[p.dir], new[p.dir]).Changes {
			changes = append(changes, Change{Pkg: p, Name: objectName(c.Message), Message: c.Message, Compatible: c.Compatible})
		}
	}
	return changes
}

// objectName returns the object of an apidiff message, "(*Cache[T]).Get:
// changed from ..." or "Cause.Reason: removed", written as a changelog
// writes it: "Cache.Get", "Cause.Reason".
func objectName(msg string) string {
	name, _, _ := strings.Cut(msg, ": ")
	name = typeParams.ReplaceAllString(name, "")
	return strings.NewReplacer("(", "", ")", "", "*", "").Replace(name)
}

var typeParams = regexp.MustCompile(`\[[^\]]*\]`)

// breakingNames returns the dotted names in backquotes in the entries of
// the Unreleased section of changelog that begin "- **Breaking:**".
func breakingNames(changelog []byte) (map[string]bool, error) {
	var entries []string
	in, found := false, false
	for line := range strings.Lines(string(changelog)) {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.HasPrefix(line, "## [Unreleased]")
			found = found || in
		case !in:
		case strings.HasPrefix(line, "- "):
			entries = append(entries, line)
		case strings.HasPrefix(line, " ") && len(entries) > 0:
			entries[len(entries)-1] += line
		case strings.TrimSpace(line) != "" && len(entries) > 0:
			entries = append(entries, "") // a heading or paragraph ends an entry
		}
	}
	if !found {
		return nil, errors.New(`CHANGELOG.md has no "## [Unreleased]" section`)
	}
	names := map[string]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e, "- **Breaking:**") {
			continue
		}
		for _, span := range backquoted.FindAllStringSubmatch(e, -1) {
			for _, name := range dotted.FindAllString(receiver.ReplaceAllString(span[1], "$1."), -1) {
				names[name] = true
			}
		}
	}
	return names, nil
}

var (
	backquoted = regexp.MustCompile("`([^`]*)`")
	receiver   = regexp.MustCompile(`\(\*?([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\)\.`) // (*Cache[T]). in (*Cache[T]).Get
	dotted     = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)
)

// readBaseline returns the revision in the baseline file: its first word
// outside comments.
func readBaseline(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line, _, _ := strings.Cut(sc.Text(), "#"); strings.TrimSpace(line) != "" {
			return strings.Fields(line)[0], nil
		}
	}
	return "", fmt.Errorf("%s names no revision", path)
}

// extract writes the tree of revision rev of the repository in root into
// dir.
func extract(root, rev, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	archive, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git archive %s: %w: %s (a shallow clone lacks the last release: fetch it, or its tag)", rev, err, strings.TrimSpace(stderr.String()))
	}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(path, data, 0o644)
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// load type-checks the packages of the module in dir, by their dir.
func load(dir string, pkgs []pkg) (map[string]*types.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax,
		Dir:  dir,
		Env:  append(os.Environ(), "GOWORK=off"),
	}
	var patterns []string
	for _, p := range pkgs {
		patterns = append(patterns, p.dir)
	}
	loaded, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	byDir := map[string]*types.Package{}
	var errs []error
	for _, p := range loaded {
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		for _, pattern := range patterns {
			if len(p.GoFiles) > 0 && filepath.Dir(p.GoFiles[0]) == filepath.Join(dir, pattern) {
				byDir[pattern] = p.Types
			}
		}
	}
	for _, pattern := range patterns {
		if byDir[pattern] == nil {
			errs = append(errs, fmt.Errorf("no package in %s", filepath.Join(dir, pattern)))
		}
	}
	return byDir, errors.Join(errs...)
}
