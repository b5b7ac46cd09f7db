package benchdoc_test

import (
	"os"
	"path/filepath"
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
