package benchdoc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
)

func TestWriteSection(t *testing.T) {
	const (
		a    = "<!-- section: a -->\n## A\n\nold a\n<!-- end section: a -->\n"
		b    = "<!-- section: b -->\n## B\n\nold b\n<!-- end section: b -->\n"
		newB = "<!-- section: b -->\n## B\n\nnew b\n<!-- end section: b -->\n"
	)
	tests := []struct {
		name    string
		before  string // "" for no file
		want    string
		wantErr bool
	}{
		{
			name: "new file",
			want: "# Benchmarks\n\nEach section is written by one driver in [bench/](bench/) and rewritten only by it.\n\n" + newB,
		},
		{
			name:   "appended after other sections",
			before: "# Benchmarks\n\n" + a,
			want:   "# Benchmarks\n\n" + a + "\n" + newB,
		},
		{
			name:   "replaced in the middle, the rest untouched",
			before: "# Benchmarks\n\n" + a + "\n" + b + "\ntrailing notes\n",
			want:   "# Benchmarks\n\n" + a + "\n" + newB + "\ntrailing notes\n",
		},
		{
			name:   "replaced at the start",
			before: b + "\n" + a,
			want:   newB + "\n" + a,
		},
		{
			name:    "start marker without end marker",
			before:  "# Benchmarks\n\n<!-- section: b -->\nold b\n" + a,
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
			if tt.before != "" {
				if err := os.WriteFile(path, []byte(tt.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := benchdoc.WriteSection(path, "b", "## B\n\nnew b\n\n")
			if tt.wantErr {
				if err == nil {
					t.Fatal("got no error, want one")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			// Writing the same section again changes nothing.
			if err := benchdoc.WriteSection(path, "b", "## B\n\nnew b\n"); err != nil {
				t.Fatal(err)
			}
			again, _ := os.ReadFile(path)
			if string(again) != string(got) {
				t.Errorf("second write: got\n%s\nwant\n%s", again, got)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	const doc = "# Benchmarks\n\n<!-- section: targets -->\nold\n<!-- end section: targets -->\n\n" +
		"<!-- section: a -->\n## Throughput and memory\n\n- date: 2026-12-05 03:00 UTC (run took 9m)\n\n" +
		"| target for ctrl | measured | limit | result |\n|---|--:|--:|---|\n| CPU vs raw | 0.700x | <= 0.80x | met |\n\n" +
		"| issue | target | measured | result |\n|---|---|--:|---|\n| 28 | hand-written | 1x | met |\n" +
		"<!-- end section: a -->\n\n" +
		"<!-- section: b -->\n## Recovery: faults\n\n- date: 2026-12-01 03:58 UTC (run took 23m)\n\n" +
		"| target for ctrl | measured (worst run) | limit | result |\n|---|--:|--:|---|\n| converges | 2.1 s | <= 15 s | met |\n" +
		"<!-- end section: b -->\n"
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := benchdoc.WriteSection(path, "b", "## Recovery: faults\n\n- date: 2026-12-05 04:00 UTC (run took 20m)\n\n"+
		"| target for ctrl | measured (worst run) | limit | result |\n|---|--:|--:|---|\n| converges | 3.0 s | <= 15 s | met |\n"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(got), "<!-- end section: targets -->")
	for _, want := range []string{
		"| [Throughput and memory](#throughput-and-memory) | CPU vs raw | 0.700x | <= 0.80x | met | 2026-12-05 03:00 UTC |\n",
		"| [Recovery: faults](#recovery-faults) | converges | 3.0 s | <= 15 s | met | 2026-12-05 04:00 UTC |\n",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("the targets section lacks %q:\n%s", want, section)
		}
	}
	if strings.Contains(section, "hand-written") || strings.Contains(section, "2.1 s") || strings.Contains(section, "\nold\n") {
		t.Errorf("the targets section holds a row it should not:\n%s", section)
	}
}
