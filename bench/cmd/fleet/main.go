// Command fleet is the driver of the fleet benchmark: the memory and
// goroutines of a controller process per engaged member cluster, with ctrl
// (Manager.Engage and a fleet cache) and with controller-runtime (one
// cluster.Cluster per member, what multicluster-runtime builds on), at 1,
// 10 and 50 members. The members are a few real control planes, each
// engaged under several names through kubeconfig files of their own, so
// each name has its own connection, watch and cache as a distinct cluster
// would. It writes its section of ../BENCHMARKS.md and a chart.
//
//	cd bench && go run ./cmd/fleet -write
//	go run ./cmd/fleet -members 1,4 -servers 2      # a smoke run
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"flag"

	"github.com/typedctrl/ctrl/bench/internal/benchdoc"
	"github.com/typedctrl/ctrl/bench/internal/controlplane"
	"github.com/typedctrl/ctrl/bench/internal/podgen"
	"github.com/typedctrl/ctrl/bench/internal/probe"
	"github.com/typedctrl/ctrl/bench/internal/svgchart"
)

var implNames = []string{"ctrl", "cr"}

type config struct {
	members   []int
	servers   int
	objects   int
	r         int
	impls     []string
	namespace string
	repo      string
	work      string
	charts    string
	write     bool
	args      string
	profiles  string
}

func main() {
	var c config
	var members, impls string
	flag.StringVar(&members, "members", "1,10,50", "member cluster counts, ascending")
	flag.IntVar(&c.servers, "servers", 3, "real control planes that serve the members")
	flag.IntVar(&c.objects, "objects", 5, "ConfigMaps in each member's namespace")
	flag.IntVar(&c.r, "r", 2, "repetitions, interleaved")
	flag.StringVar(&impls, "impls", strings.Join(implNames, ","), "implementations, from "+strings.Join(implNames, ","))
	flag.StringVar(&c.namespace, "namespace", "fleet", "namespace of the ConfigMaps in each member")
	flag.StringVar(&c.repo, "repo", "..", "root of the github.com/typedctrl/ctrl module")
	flag.StringVar(&c.work, "workdir", filepath.Join(os.TempDir(), "ctrlbench-fleet"), "directory for binaries, kubeconfigs and logs")
	flag.StringVar(&c.charts, "charts", "bench/charts", "directory of the SVG charts, relative to -repo; written with -write")
	flag.StringVar(&c.profiles, "profile-dir", "", "make every process write heap and goroutine profiles here once measured")
	flag.BoolVar(&c.write, "write", false, "write the fleet section of BENCHMARKS.md and its chart")
	flag.Parse()
	c.args = strings.Join(os.Args[1:], " ")
	for _, f := range strings.Split(members, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 || v > 100 {
			fatal(fmt.Errorf("-members %q: want counts from 1 to 100", members))
		}
		c.members = append(c.members, v)
	}
	for _, f := range strings.Split(impls, ",") {
		if f = strings.TrimSpace(f); !slices.Contains(implNames, f) {
			fatal(fmt.Errorf("unknown implementation %q", f))
		}
		c.impls = append(c.impls, strings.TrimSpace(f))
	}
	if !slices.IsSorted(c.members) || c.servers <= 0 || c.objects <= 0 || c.r <= 0 {
		fatal(errors.New("-members must ascend; -servers, -objects and -r be positive"))
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "fleet:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// memberName is the i-th member's name: m-00, m-01, ...
func memberName(i int) string { return fmt.Sprintf("m-%02d", i) }

type fleetRun struct {
	impl    string
	members int
	rep     int
	first   float64
	mem     probe.Mem
}

func run(c config) error {
	var err error
	if c.repo, err = filepath.Abs(c.repo); err != nil {
		return err
	}
	membersDir := filepath.Join(c.work, "members")
	for _, dir := range []string{filepath.Join(c.work, "bin"), filepath.Join(c.work, "logs"), membersDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	doc := benchdoc.Begin(c.repo)
	logf("building the control plane command and the controllers")
	cpBin := filepath.Join(c.work, "bin", "controlplane")
	if err := controlplane.Build(c.repo, cpBin); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, impl := range c.impls {
		out := filepath.Join(c.work, "bin", "fleet-"+impl)
		cmd := exec.Command("go", "build", "-o", out, "-trimpath", "-ldflags=-s -w", "./cmd/fleet-"+impl)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/fleet-%s: %w", impl, err)
		}
		bins[impl] = out
	}
	ctx := context.Background()
	var kubeconfigs []string
	for i := range c.servers {
		logf("starting control plane %d of %d", i+1, c.servers)
		cp, err := controlplane.Start(cpBin, filepath.Join(c.work, "logs", fmt.Sprintf("controlplane-%d.log", i)), nil)
		if err != nil {
			return err
		}
		defer cp.Stop()
		kubeconfigs = append(kubeconfigs, cp.Kubeconfig())
		if err := populate(ctx, cp.Kubeconfig(), c.namespace, c.objects); err != nil {
			return err
		}
	}
	top := c.members[len(c.members)-1]
	for i := range top {
		data, err := os.ReadFile(kubeconfigs[i%c.servers])
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(membersDir, memberName(i)+".yaml"), data, 0o600); err != nil {
			return err
		}
	}
	var runs []fleetRun
	for rep := 1; rep <= c.r; rep++ {
		for _, m := range c.members {
			for _, impl := range c.impls {
				n := m * c.objects
				args := []string{"-kubeconfig", kubeconfigs[0], "-namespace", c.namespace, "-n", strconv.Itoa(n),
					"-members-dir", membersDir, "-members", strconv.Itoa(m), "-objects", strconv.Itoa(c.objects)}
				if c.profiles != "" {
					args = append(args, "-profile-dir", c.profiles, "-profile-tag", fmt.Sprintf("%d-r%d", m, rep))
				}
				logPath := filepath.Join(c.work, "logs", fmt.Sprintf("%s-%d-r%d.log", impl, m, rep))
				p, err := probe.Start(bins[impl], args, nil, logPath)
				if err != nil {
					return err
				}
				a, err := p.Do("first " + strconv.Itoa(n))
				if err != nil {
					p.Kill()
					return fmt.Errorf("%s with %d members: %w", impl, m, err)
				}
				r := fleetRun{impl: impl, members: m, rep: rep, first: a.Seconds}
				if a, err = p.Do("measure"); err != nil {
					p.Kill()
					return err
				}
				r.mem = *a.Mem
				if err := p.Exit(); err != nil {
					return fmt.Errorf("%s with %d members: exit: %w", impl, m, err)
				}
				logf("%s, %d members: all once %.2fs, heap %.1f MiB, rss %.1f MiB, %d goroutines", impl, m, r.first,
					float64(r.mem.HeapInuse)/(1<<20), float64(r.mem.RSS)/(1<<20), r.mem.Goroutines)
				runs = append(runs, r)
			}
		}
	}
	doc.Finish()
	res := &results{cfg: c, run: doc, runs: runs}
	md := res.document()
	fmt.Println(md)
	fmt.Printf("load average before: %s, after: %s\n", doc.LoadBefore, doc.LoadAfter)
	if c.write {
		dir := filepath.Join(c.repo, c.charts)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "fleet-heap.svg"), []byte(res.chart()), 0o644); err != nil {
			return err
		}
		path := filepath.Join(c.repo, "BENCHMARKS.md")
		if err := benchdoc.WriteSection(path, "fleet", md); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}

// populate creates the namespace and its ConfigMaps in one control plane.
func populate(ctx context.Context, kubeconfig, namespace string, objects int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: podgen.Name("cm", i), Namespace: namespace},
			Data: map[string]string{"setting": strings.Repeat("x", 64)}}
		if _, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// chart draws the heap against the members.
func (res *results) chart() string {
	ch := svgchart.Chart{Title: "Heap against member clusters engaged", XLabel: "member clusters", YLabel: "MiB (HeapInuse after GC)"}
	for _, impl := range res.cfg.impls {
		s := svgchart.Series{Name: impl, Dash: impl != "ctrl"}
		for _, m := range res.cfg.members {
			s.X, s.Y = append(s.X, float64(m)), append(s.Y, res.median(impl, m, func(r fleetRun) float64 { return float64(r.mem.HeapInuse) })/(1<<20))
		}
		ch.Series = append(ch.Series, s)
	}
	return svgchart.Lines(ch)
}
