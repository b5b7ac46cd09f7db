// Package docs_test keeps the code of README.md and the guides in docs/
// true: every Go block is a file of the repository, or a part of one,
// which the build compiles and the tests run, and so is every YAML block
// that says where it is from. A block says which, in an HTML comment on
// the line before it (GitHub does not show it):
//
//	<!-- file: examples/widget/widget.go -->     the whole file
//	<!-- excerpt: docs/snippets_test.go -->       lines of it, indented alike
//	<!-- checked: examples/provisioner -->        a test in that directory checks it
//
// Blocks that are in no other file are in snippets_test.go.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/typedctrl/ctrl/internal/binaries"
)

// docs are the files whose code is checked, relative to the repository.
func docs(t *testing.T) []string {
	guides, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, guides...)
}

var (
	fence  = regexp.MustCompile("^([ \t]*)```(go|yaml)$")
	marker = regexp.MustCompile(`^\s*<!-- (file|excerpt|checked): (\S+) -->$`)
)

// TestCode checks every Go block of the README and the guides against the
// file its marker names.
func TestCode(t *testing.T) {
	blocks := 0
	for _, doc := range docs(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			m := fence.FindStringSubmatch(lines[i])
			if m == nil {
				continue
			}
			blocks++
			indent, start := m[1], i+1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			var code strings.Builder
			for _, l := range lines[start:i] {
				code.WriteString(strings.TrimPrefix(l, indent) + "\n")
			}
			where := doc + ":" + strconv.Itoa(start)
			mk := marker.FindStringSubmatch(lines[start-2])
			if mk == nil && m[2] == "yaml" {
				continue // YAML is checked when it says where it is from
			}
			if mk == nil {
				t.Errorf("%s: a Go block without a marker saying which file holds it (%s)", where, "<!-- file|excerpt|checked: path -->")
				continue
			}
			path := filepath.Join("..", filepath.FromSlash(mk[2]))
			if mk[1] == "checked" {
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: %v", where, err)
				}
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			switch {
			case mk[1] == "file" && string(src) != code.String():
				t.Errorf("%s: the block differs from %s: copy the file into it", where, mk[2])
			case mk[1] == "excerpt" && m[2] == "yaml" && !strings.Contains(string(src), code.String()):
				t.Errorf("%s: the block is not in %s: copy it there, or from there\n%s", where, mk[2], code.String())
			case mk[1] == "excerpt" && m[2] == "go" && !containsIndented(string(src), code.String()):
				t.Errorf("%s: the block is not in %s (indented alike): copy it there, or from there\n%s", where, mk[2], code.String())
			}
		}
	}
	if blocks < 10 {
		t.Errorf("found %d Go blocks, want the README's and the guides'", blocks)
	}
}

// TestShown checks that the files a reader follows are shown whole where
// the text says they are, and the command that builds the binaries.
func TestShown(t *testing.T) {
	for doc, files := range map[string][]string{
		"../README.md":                  {"examples/quickstart/main.go", "examples/quickstart/main_test.go"},
		"custom-resources.md":           {"examples/widget/types.go", "examples/widget/widget.go"},
		"testing.md":                    {"examples/widget/fake_test.go", "examples/widget/apiserver_test.go"},
		"testing-under-perturbation.md": {"examples/widget/explore_test.go"},
		"production.md":                 {"examples/widget/cmd/widget-controller/main.go"},
	} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !strings.Contains(string(data), "<!-- file: "+f+" -->\n```go\n") {
				t.Errorf("%s does not show %s whole", doc, f)
			}
		}
	}
	data, err := os.ReadFile("testing.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "```\n"+binaries.Command+"\n```\n") {
		t.Errorf("testing.md does not show the command %q in a block of its own", binaries.Command)
	}
}

// containsIndented reports whether src holds block with every non-empty
// line indented by the same number of tabs, none or more.
func containsIndented(src, block string) bool {
	for tabs := 0; tabs <= 4; tabs++ {
		lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
		for i, l := range lines {
			if l != "" {
				lines[i] = strings.Repeat("\t", tabs) + l
			}
		}
		if strings.Contains(src, strings.Join(lines, "\n")+"\n") {
			return true
		}
	}
	return false
}
