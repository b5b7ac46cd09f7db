package ctrl_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart keeps the README's quick start identical to
// examples/quickstart/main.go, which the build compiles.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	must(t, err)
	src, err := os.ReadFile("examples/quickstart/main.go")
	must(t, err)
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Error("README.md's quick start differs from examples/quickstart/main.go: copy the file into the README")
	}
}
