package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFaultsChart(t *testing.T) {
	doc := `# Benchmarks

<!-- section: faults -->
## Recovery

### Faults during writes

| implementation | s after the last fault, each run | median | max |
|---|---|--:|--:|
| ctrl | 6.8, 7.3 | 7.0 | 7.3 |
| cr | 51.3, 38.5 | 44.9 | 51.3 |
| raw | 26.3, 15.3 | 20.8 | 26.3 |

| target for ctrl | measured (worst run) | limit | result |
|---|--:|--:|---|
| converged | 7.3 s | <= 15 s | met |

### Silent blackhole

| implementation | caught up s after the blackhole, each run | median | max |
|---|---|--:|--:|
| ctrl | 47.1, 46.9 | 47.0 | 47.1 |
| cr | 48.9, 49.0 | 48.9 | 49.0 |
| raw | 47.9, 48.7 | 48.3 | 48.7 |
<!-- end section: faults -->
`
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	ch, ok := faultsChart(path)
	if !ok {
		t.Fatal("no chart")
	}
	if want := []string{"faults during writes", "silent blackhole"}; len(ch.Groups) != 2 || ch.Groups[0] != want[0] || ch.Groups[1] != want[1] {
		t.Errorf("groups: got %q, want %q", ch.Groups, want)
	}
	if got := ch.Series[1].Y; len(got) != 2 || got[0] != 44.9 || got[1] != 48.9 {
		t.Errorf("cr medians: got %v, want [44.9 48.9]", got)
	}
	if _, ok := faultsChart(filepath.Join(t.TempDir(), "none.md")); ok {
		t.Error("a missing file gave a chart")
	}
}
