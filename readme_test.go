package ctrl_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmePrograms keeps the programs shown in README.md identical to
// the files the build compiles.
func TestReadmePrograms(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	must(t, err)
	for _, path := range []string{"examples/quickstart/main.go", "examples/quickstart/main_test.go", "examples/widget/cmd/widget-controller/main.go"} {
		src, err := os.ReadFile(path)
		must(t, err)
		if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
			t.Errorf("README.md's copy of %s differs: copy the file into the README", path)
		}
	}
}
