package provisioner_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeStateMachines keeps docs/state-machines.md true
// to the files here: each code block in it is a part of the file it follows
// (indented one or more levels less), and the line counts are the files'.
func TestReadmeStateMachines(t *testing.T) {
	data, err := os.ReadFile("../../docs/state-machines.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	files := map[string]string{}
	for _, name := range []string{"machine.go", "plain.go"} {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(src)
		lines := strings.Count(string(src), "\n")
		if row := fmt.Sprintf("| `examples/provisioner/%s`", name); !regexp.MustCompile(regexp.QuoteMeta(row) + `[^|]*\| ` + fmt.Sprint(lines) + ` \|`).MatchString(section) {
			t.Errorf("docs/state-machines.md: the row of %s does not say %d lines", name, lines)
		}
	}
	blocks := regexp.MustCompile("(?s)\\(\\.\\./examples/provisioner/([a-z]+\\.go)\\).*?```go\n(.*?)```\n").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/state-machines.md: got %d code blocks after links to the files, want 2", len(blocks))
	}
	for _, b := range blocks {
		name, block := b[1], b[2]
		if name == "machine.go" {
			block = strings.Replace(block, "machine := ctrl.Machine", "return ctrl.Machine", 1)
		}
		if !containsIndented(files[name], block) {
			t.Errorf("docs/state-machines.md's excerpt of %s is not in the file: copy it again\n%s", name, block)
		}
	}
}

// containsIndented reports whether src holds block with every line
// indented by the same number of tabs, one or more.
func containsIndented(src, block string) bool {
	for tabs := 1; tabs <= 4; tabs++ {
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
