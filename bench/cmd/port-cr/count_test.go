package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLineCount keeps the line count that examples/port/README.md states
// for this program true. The ctrl program's is checked in ctrl's module.
func TestLineCount(t *testing.T) {
	readme, err := os.ReadFile("../../../examples/port/README.md")
	if err != nil {
		t.Fatal(err)
	}
	path := "bench/cmd/port-cr/main.go"
	m := regexp.MustCompile(`(?m)^\| \[` + "`" + regexp.QuoteMeta(path) + "`" + `\]\([^)]*\) \| [^|]* \| (\d+) \|$`).FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatalf("examples/port/README.md states no line count for %s", path)
	}
	stated, _ := strconv.Atoi(m[1])
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	// Lines that are neither blank nor only a comment, as the README's
	// grep pipeline counts them.
	got := 0
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "//") {
			got++
		}
	}
	if got != stated {
		t.Errorf("main.go has %d lines that are neither blank nor only a comment; examples/port/README.md says %d: update it", got, stated)
	}
}
