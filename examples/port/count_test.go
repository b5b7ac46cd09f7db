package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLineCount keeps the line counts README.md states true, for both
// programs: the controller-runtime one is in another module, but its source
// is a file of this repository, and this module's tests are the ones CI
// runs. bench/cmd/port-cr/count_test.go checks it from its own module too.
func TestLineCount(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for path, file := range map[string]string{
		"examples/port/main.go":     "main.go",
		"bench/cmd/port-cr/main.go": "../../bench/cmd/port-cr/main.go",
	} {
		stated := statedLines(t, string(readme), path)
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := countLines(string(src)); got != stated {
			t.Errorf("%s has %d lines that are neither blank nor only a comment; README.md says %d: update it", path, got, stated)
		}
	}
}

// countLines counts the lines that are neither blank nor only a comment,
// as README.md's grep pipeline does.
func countLines(src string) int {
	n := 0
	for line := range strings.Lines(src) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "//") {
			n++
		}
	}
	return n
}

// statedLines returns the count README.md states for path, in the row
// "| [`path`](...) | written with | lines |".
func statedLines(t *testing.T, readme, path string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\| \[` + "`" + regexp.QuoteMeta(path) + "`" + `\]\([^)]*\) \| [^|]* \| (\d+) \|$`).FindStringSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md states no line count for %s", path)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
