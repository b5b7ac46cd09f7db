package ctrl_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmePrograms keeps the programs shown in README.md and the guides
// identical to the files the build compiles.
func TestReadmePrograms(t *testing.T) {
	for doc, paths := range map[string][]string{
		"README.md":          {"examples/quickstart/main.go", "examples/quickstart/main_test.go"},
		"docs/production.md": {"examples/widget/cmd/widget-controller/main.go"},
	} {
		text, err := os.ReadFile(doc)
		must(t, err)
		for _, path := range paths {
			src, err := os.ReadFile(path)
			must(t, err)
			if !strings.Contains(string(text), "```go\n"+string(src)+"```\n") {
				t.Errorf("%s's copy of %s differs: copy the file into it", doc, path)
			}
		}
	}
}
