package benchdoc

import (
	"fmt"
	"strings"
)

// targetsName is the section that gathers every section's targets.
const targetsName = "targets"

// refreshTargets rewrites doc's targets section, if it has one, from the
// other sections.
func refreshTargets(doc string) (string, error) {
	if markerLine(doc, startMarker(targetsName)) < 0 {
		return doc, nil
	}
	return replaceSection(doc, targetsName, Targets(doc))
}

// Targets returns the body of the targets section of doc: one table of the
// rows of every table, in every other section, whose first column is a
// target and which has measured, limit and result columns, each row with
// its section and the date of the run that wrote it.
func Targets(doc string) string {
	var b strings.Builder
	b.WriteString("## Targets\n\n")
	b.WriteString("Every target a benchmark driver checks, gathered from the sections below, where each is explained. A row\n")
	b.WriteString("comes from the latest run of its section's driver (the run column), and this table is rewritten whenever\n")
	b.WriteString("a driver writes its section, so it never shows a target older than the run it quotes.\n\n")
	b.WriteString("| section | target | measured | limit | result | run |\n|---|---|--:|--:|---|---|\n")
	for _, s := range sections(doc) {
		if s.name == targetsName {
			continue
		}
		for _, row := range targetRows(s.body) {
			fmt.Fprintf(&b, "| [%s](#%s) | %s | %s | %s | %s | %s |\n", s.title, anchor(s.title), row[0], row[1], row[2], row[3], s.date)
		}
	}
	return b.String()
}

type section struct{ name, title, date, body string }

// sections returns doc's sections in order, with their first "## " title
// and the date their run began ("- date: ...").
func sections(doc string) []section {
	var out []section
	const prefix = "<!-- section: "
	for rest := doc; ; {
		i := strings.Index(rest, prefix)
		if i < 0 {
			return out
		}
		rest = rest[i+len(prefix):]
		name, _, _ := strings.Cut(rest, " -->")
		end := strings.Index(rest, endMarker(name))
		if end < 0 {
			return out
		}
		s := section{name: name, body: rest[:end], date: "-"}
		rest = rest[end:]
		for line := range strings.Lines(s.body) {
			line = strings.TrimSpace(line)
			switch {
			case s.title == "" && strings.HasPrefix(line, "## "):
				s.title = strings.TrimPrefix(line, "## ")
			case s.date == "-" && strings.HasPrefix(line, "- date: "):
				s.date, _, _ = strings.Cut(strings.TrimPrefix(line, "- date: "), " (")
			}
		}
		out = append(out, s)
	}
}

// targetRows returns the target, measured, limit and result cells of the
// rows of body's target tables.
func targetRows(body string) [][4]string {
	var out [][4]string
	var cols []int // of measured, limit, result; nil outside a target table
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			cols = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cols == nil && strings.HasPrefix(cells[0], "target"):
			cols = []int{-1, -1, -1}
			for i, c := range cells {
				for j, name := range []string{"measured", "limit", "result"} {
					if strings.HasPrefix(c, name) {
						cols[j] = i
					}
				}
			}
			if cols[0] < 0 || cols[1] < 0 || cols[2] < 0 {
				cols = nil
			}
		case cols == nil || strings.HasPrefix(cells[0], "---"):
		case len(cells) > max(cols[0], cols[1], cols[2]):
			out = append(out, [4]string{cells[0], cells[cols[0]], cells[cols[1]], cells[cols[2]]})
		}
	}
	return out
}

// anchor is the GitHub anchor of a heading.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
