// Package svgchart writes the benchmark's charts as small, self-contained
// SVG files: line charts of a measure against a count, and grouped bar
// charts. No fonts, scripts or links: the files render the same in a
// browser and on a code host.
package svgchart

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// palette is color-blind friendly (Okabe and Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// Series is one line, or one color of bars.
type Series struct {
	Name string
	// Points are (x, y) pairs of a line chart, in order of x; a bar chart
	// reads only Y, one per group.
	X, Y []float64
	Dash bool // draw the line dashed
}

// Chart is a chart's text and data.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	Groups                []string // bar charts: the label of each group of bars
}

const (
	width, height        = 720, 420
	left, right          = 70, 200 // margins; the legend sits on the right
	top, bottom          = 40, 55
	plotW, plotH         = width - left - right, height - top - bottom
	fontAttr             = `font-family="sans-serif"`
	axisColor, gridColor = "#333", "#ddd"
)

// ticks returns about n round values from 0 to at least hi.
func ticks(hi float64, n int) []float64 {
	if hi <= 0 {
		hi = 1
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v < hi+step*0.999; v += step {
		out = append(out, v)
	}
	return out
}

func label(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000 && math.Mod(v, 1000) == 0:
		return fmt.Sprintf("%gk", v/1000)
	default:
		return fmt.Sprintf("%g", math.Round(v*100)/100)
	}
}

func header(b *strings.Builder, c Chart) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="24" %s font-size="16" font-weight="bold">%s</text>`+"\n", left, fontAttr, html.EscapeString(c.Title))
	fmt.Fprintf(b, `<text x="%d" y="%d" %s font-size="12" text-anchor="middle">%s</text>`+"\n", left+plotW/2, height-12, fontAttr, html.EscapeString(c.XLabel))
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" %s font-size="12" text-anchor="middle">%s</text>`+"\n", top+plotH/2, fontAttr, html.EscapeString(c.YLabel))
}

// yAxis draws horizontal grid lines and their labels, and returns the
// function from a value to its y coordinate.
func yAxis(b *strings.Builder, hi float64) func(float64) float64 {
	ts := ticks(hi, 5)
	top_ := ts[len(ts)-1]
	y := func(v float64) float64 { return float64(top+plotH) - v/top_*float64(plotH) }
	for _, t := range ts {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, left+plotW, y(t), y(t), gridColor)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" %s font-size="11" text-anchor="end">%s</text>`+"\n", left-6, y(t)+4, fontAttr, label(t))
	}
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s"/>`+"\n", left, left, top, top+plotH, axisColor)
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s"/>`+"\n", left, left+plotW, top+plotH, top+plotH, axisColor)
	return y
}

func legend(b *strings.Builder, series []Series, bars bool) {
	for i, s := range series {
		y := top + 10 + i*20
		x := left + plotW + 16
		color := palette[i%len(palette)]
		if bars {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="10" fill="%s"/>`+"\n", x, y-5, color)
		} else {
			dash := ""
			if s.Dash {
				dash = ` stroke-dasharray="5 3"`
			}
			fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`+"\n", x, x+18, y, y, color, dash)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" %s font-size="12">%s</text>`+"\n", x+24, y+4, fontAttr, html.EscapeString(s.Name))
	}
}

// Lines returns c as a line chart; both axes start at 0.
func Lines(c Chart) string {
	var b strings.Builder
	header(&b, c)
	var xHi, yHi float64
	for _, s := range c.Series {
		for i := range s.X {
			xHi, yHi = max(xHi, s.X[i]), max(yHi, s.Y[i])
		}
	}
	y := yAxis(&b, yHi)
	xs := ticks(xHi, 5)
	xTop := xs[len(xs)-1]
	x := func(v float64) float64 { return float64(left) + v/xTop*float64(plotW) }
	for _, t := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s font-size="11" text-anchor="middle">%s</text>`+"\n", x(t), top+plotH+16, fontAttr, label(t))
	}
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		var pts []string
		for j := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.X[j]), y(s.Y[j])))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(pts, " "), color, dash)
		for j := range s.X {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x(s.X[j]), y(s.Y[j]), color)
		}
	}
	legend(&b, c.Series, false)
	b.WriteString("</svg>\n")
	return b.String()
}

// Bars returns c as a grouped bar chart: one group per c.Groups, one bar
// per series in each, none where the value is 0 or NaN (not measured); the
// y axis starts at 0.
func Bars(c Chart) string {
	var b strings.Builder
	header(&b, c)
	var yHi float64
	for _, s := range c.Series {
		for _, v := range s.Y {
			yHi = max(yHi, v)
		}
	}
	y := yAxis(&b, yHi)
	groupW := float64(plotW) / float64(max(len(c.Groups), 1))
	barW := groupW * 0.8 / float64(max(len(c.Series), 1))
	for g, name := range c.Groups {
		gx := float64(left) + float64(g)*groupW
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s font-size="11" text-anchor="middle">%s</text>`+"\n", gx+groupW/2, top+plotH+16, fontAttr, html.EscapeString(name))
		for i, s := range c.Series {
			if g >= len(s.Y) || !(s.Y[g] > 0) {
				continue // not measured
			}
			bx := gx + groupW*0.1 + float64(i)*barW
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", bx, y(s.Y[g]), barW*0.92, y(0)-y(s.Y[g]), palette[i%len(palette)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="middle">%s</text>`+"\n", bx+barW*0.46, y(s.Y[g])-3, fontAttr, label(s.Y[g]))
		}
	}
	legend(&b, c.Series, true)
	b.WriteString("</svg>\n")
	return b.String()
}
