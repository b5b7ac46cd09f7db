package widget_test

import (
	"os"
	"strings"
	"testing"

	"github.com/typedctrl/ctrl/internal/binaries"
)

// TestReadmeTesting keeps README.md's "A custom resource" (the types and the
// controller), "Testing your controller" and "Testing against the states
// production brings" identical to the files here, which go test compiles and runs,
// and to the command that builds the binaries. ctrltest/cmd/controlplane's TestUserModule runs them in a
// module of their own.
func TestReadmeTesting(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, path := range []string{"types.go", "widget.go", "fake_test.go", "apiserver_test.go", "explore_test.go"} {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(readme, "`examples/widget/"+path+"`:\n\n```go\n"+string(src)+"```\n") {
			t.Errorf("README.md's copy of examples/widget/%s differs: copy the file into the README", path)
		}
	}
	if !strings.Contains(readme, "```\n"+binaries.Command+"\n```\n") {
		t.Errorf("README.md does not show the command %q in a block of its own", binaries.Command)
	}
}
