package svgchart

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// wellFormed fails t if s is not well-formed XML.
func wellFormed(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); err == io.EOF {
			return
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func TestCharts(t *testing.T) {
	c := Chart{Title: "heap & RSS <MiB>", XLabel: "Pods", YLabel: "MiB", Groups: []string{"a", "b"},
		Series: []Series{{Name: "ctrl", X: []float64{10000, 50000, 100000}, Y: []float64{50, 240, 480}},
			{Name: "cr", X: []float64{10000, 50000, 100000}, Y: []float64{90, 440, 880}, Dash: true}}}
	for name, svg := range map[string]string{"lines": Lines(c), "bars": Bars(c)} {
		t.Run(name, func(t *testing.T) {
			wellFormed(t, svg)
			if !strings.Contains(svg, "heap &amp; RSS &lt;MiB&gt;") {
				t.Errorf("title not escaped: got %.200s", svg)
			}
		})
	}
	if got := ticks(880, 5); got[len(got)-1] < 880 {
		t.Errorf("ticks(880) end at %v, want >= 880", got[len(got)-1])
	}
}
