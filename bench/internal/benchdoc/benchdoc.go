// Package benchdoc writes BENCHMARKS.md, which several drivers share: each
// owns one section, between the lines
//
//	<!-- section: NAME -->
//	<!-- end section: NAME -->
//
// and replaces only that section, leaving the rest of the file as it is.
// It also describes the machine a benchmark ran on.
package benchdoc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// preamble starts a BENCHMARKS.md that does not exist yet.
const preamble = "# Benchmarks\n\n" +
	"Each section is written by one driver in [bench/](bench/) and rewritten only by it.\n"

func startMarker(name string) string { return "<!-- section: " + name + " -->" }
func endMarker(name string) string   { return "<!-- end section: " + name + " -->" }

// WriteSection makes body the content of the section named name in the
// markdown file at path: it replaces the section if the file has it, appends
// it otherwise, and creates the file if needed. It then rewrites the targets
// section, if the file has one ([Targets]).
func WriteSection(path, name, body string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = []byte(preamble), nil
	}
	if err != nil {
		return err
	}
	doc, err := replaceSection(string(data), name, body)
	if err == nil {
		doc, err = refreshTargets(doc)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// replaceSection returns doc with the section named name replaced by body,
// or with the section appended if doc has none.
func replaceSection(doc, name, body string) (string, error) {
	section := startMarker(name) + "\n" + strings.TrimRight(body, "\n") + "\n" + endMarker(name) + "\n"
	start := markerLine(doc, startMarker(name))
	if start < 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section, nil
	}
	rest := doc[start:]
	end := markerLine(rest, endMarker(name))
	if end < 0 {
		return "", fmt.Errorf("section %q has no line %q", name, endMarker(name))
	}
	after := rest[end+len(endMarker(name)):]
	after = strings.TrimPrefix(after, "\n")
	return doc[:start] + section + after, nil
}

// markerLine returns the offset of the line that is exactly marker, or -1.
func markerLine(doc, marker string) int {
	for off := 0; off < len(doc); {
		line, _, _ := strings.Cut(doc[off:], "\n")
		if strings.TrimSpace(line) == marker {
			return off
		}
		off += len(line) + 1
	}
	return -1
}

// Run is what every section says about the invocation that wrote it: when it
// ran, on what, and with which ctrl.
type Run struct {
	Started, Finished     time.Time
	LoadBefore, LoadAfter string // 1, 5 and 15 minute load averages
	Library               string // the ctrl commit the binaries were built from
}

// Begin starts describing an invocation of a driver that builds the ctrl
// module at repo.
func Begin(repo string) *Run {
	return &Run{Started: time.Now(), LoadBefore: LoadAvg(), Library: LibraryState(repo)}
}

// Finish records the end of the invocation.
func (r *Run) Finish() {
	r.Finished, r.LoadAfter = time.Now(), LoadAvg()
}

// Setup returns the first bullets of a section's setup: date, machine, load
// (with loadNote, which says what the load means for the results), Go, ctrl,
// and the command, run from bench/.
func (r *Run) Setup(loadNote, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- date: %s (run took %s)\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(&b, "- machine: %s\n", Machine())
	fmt.Fprintf(&b, "- load average (1, 5, 15 min): %s before, %s after; %s\n", r.LoadBefore, r.LoadAfter, loadNote)
	fmt.Fprintf(&b, "- Go: %s; k8s.io modules v0.37.2; kube-apiserver and etcd built by `make controlplane`\n", runtime.Version())
	fmt.Fprintf(&b, "- ctrl: %s\n", r.Library)
	fmt.Fprintf(&b, "- command: `cd bench && %s`\n", command)
	return b.String()
}

// Machine describes the machine: its CPUs and memory.
func Machine() string {
	return fmt.Sprintf("%d CPUs (%s), %s memory", runtime.NumCPU(), cpuModel(), memTotal())
}

// LoadAvg returns /proc/loadavg's 1, 5 and 15 minute averages.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// LibraryState describes the commit of the ctrl module at repo, which the
// binaries were built from, and whether its working tree had changes, but
// for BENCHMARKS.md, which the drivers write and no binary is built from.
func LibraryState(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	state := "commit " + strings.TrimSpace(string(out))
	changed, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md").Output()
	if err == nil && len(strings.TrimSpace(string(changed))) > 0 {
		state += fmt.Sprintf(" with uncommitted changes to %d files", len(strings.Split(strings.TrimSpace(string(changed)), "\n")))
	}
	return state
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			var kb float64
			fmt.Sscanf(f[1], "%g", &kb)
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return "unknown"
}
