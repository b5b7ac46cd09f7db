package main

import (
	"os"
	"path/filepath"
	"strings"
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

// TestKilledRun checks that a container run the kernel killed is reported
// as such, in a row of the update table's width, not as measurements.
func TestKilledRun(t *testing.T) {
	res := &results{}
	table := res.updateTable([]memRun{{Impl: "raw-strip", Variant: "container limit 1.5x heap", Killed: true, Limit: 541 << 20, CgroupPeak: 541 << 20, OOMKills: 1}}, true)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "killed by the kernel") {
		t.Fatalf("table:\n%s\nwant a header, a rule and a row saying the run was killed", table)
	}
	if got, want := strings.Count(lines[2], "|"), strings.Count(lines[0], "|"); got != want {
		t.Errorf("the killed run's row has %d cells' bars, the header %d:\n%s", got, want, table)
	}
}
