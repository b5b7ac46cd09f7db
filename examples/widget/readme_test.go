package widget_test

import (
	"os"
	"strings"
	"testing"

	"github.com/typedctrl/ctrl/internal/binaries"
)

// TestReadmeTesting keeps the guides' copies of the Widget (custom
// resources: the types and the controller; testing; testing under
// perturbation) identical to the files here, which go test compiles and
// runs, and shows the command that builds the binaries.
// ctrltest/cmd/controlplane's TestUserModule runs them in a module of
// their own.
func TestReadmeTesting(t *testing.T) {
	var docs strings.Builder
	for _, name := range []string{"custom-resources.md", "testing.md", "testing-under-perturbation.md"} {
		data, err := os.ReadFile("../../docs/" + name)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	text := docs.String()
	for _, path := range []string{"types.go", "widget.go", "fake_test.go", "apiserver_test.go", "explore_test.go"} {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, "`examples/widget/"+path+"`:\n\n```go\n"+string(src)+"```\n") {
			t.Errorf("docs/'s copy of examples/widget/%s differs: copy the file into the guide", path)
		}
	}
	if !strings.Contains(text, "```\n"+binaries.Command+"\n```\n") {
		t.Errorf("docs/testing.md does not show the command %q in a block of its own", binaries.Command)
	}
}
