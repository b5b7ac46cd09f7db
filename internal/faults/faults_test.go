// Package faults runs a controller through control-plane faults on a real
// kube-apiserver: the API server killed and restarted, and the controller
// paused until its watch position has been compacted away (410 Gone). It
// checks that nothing was lost and reports how long the controller took to
// converge after the last fault.
package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

var env *ctrltest.Env

const childEnv = "CTRL_FAULTS_CHILD"

func TestMain(m *testing.M) {
	if ns := os.Getenv(childEnv); ns != "" {
		os.Exit(runMirror(ns))
	}
	os.Exit(ctrltest.Run(m, ctrltest.Options{APIServerFlags: []string{
		// Compact often and serve ConfigMap watches from etcd, so that a
		// watch that falls behind gets 410 Gone.
		"--etcd-compaction-interval=2s",
		"--watch-cache-sizes=configmaps#0",
	}}, func(e *ctrltest.Env) error {
		env = e
		return nil
	}))
}

// runMirror is the controller under test, in its own process so that the
// test can pause it: it mirrors each ConfigMap labeled role=src into a
// ConfigMap dst-<name> with the same data, and deletes the mirror when the
// source is gone.
func runMirror(ns string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	log := logLines(os.Stdout)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, Logger: log, MetricsAddress: "127.0.0.1:0",
		MetricsServing: ctrl.MetricsServing{Insecure: true}, FieldManager: "mirror"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, src *corev1.ConfigMap) (ctrl.Result, error) {
		dst := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: "dst-" + src.Name}, Data: src.Data}
		_, err := cms.Apply(ctx, dst, ctrl.ApplyParams{Force: true})
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Workers: 4, Cache: ctrl.CacheOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"role": "src"})}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = c.OnDelete(func(ctx context.Context, src *corev1.ConfigMap) error {
		return ctrl.IgnoreNotFound(cms.Delete(ctx, ctrl.Key{Namespace: src.Namespace, Name: "dst-" + src.Name}, metav1.DeleteOptions{}))
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// The test closes stdin to stop the controller cleanly.
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	go func() {
		if err := mgr.WaitIdle(ctx, time.Hour); err == nil {
			fmt.Printf("metrics %s\n", mgr.Addresses().Metrics)
		}
	}()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestOutagesAndCompaction(t *testing.T) {
	const objects = 1000
	cs := kubernetes.NewForConfigOrDie(env.Config())
	ctx := context.Background()
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	srcName := func(i int) string { return fmt.Sprintf("s%04d", i) }
	create := func(i int, v int64) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: srcName(i), Labels: map[string]string{"role": "src"}},
			Data: map[string]string{"v": strconv.FormatInt(v, 10)}}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < objects; i += 8 {
				if err := create(i, 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	// The controller, in its own process.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+ns, "KUBECONFIG="+env.KubeconfigPath())
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childDone := make(chan error, 1)
	var logMu sync.Mutex
	var logs []string
	metricsAddr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if addr, ok := strings.CutPrefix(line, "metrics "); ok {
				metricsAddr <- addr
				continue
			}
			logMu.Lock()
			logs = append(logs, line)
			logMu.Unlock()
		}
		childDone <- child.Wait()
	}()
	t.Cleanup(func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Kill()
	})
	var addr string
	select {
	case addr = <-metricsAddr:
	case <-time.After(2 * time.Minute):
		t.Fatal("the controller did not become idle")
	}

	// Writers: about 200 writes per second to random sources, including
	// deletions and re-creations, until stopped. Failed writes (during an
	// outage) are not acknowledged and need not be mirrored.
	stop := make(chan struct{})
	var acked, failed atomic.Int64
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for n := int64(1); ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				i := r.IntN(objects)
				var err error
				switch r.IntN(20) {
				case 0:
					err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, srcName(i), metav1.DeleteOptions{})
				case 1:
					err = create(i, n)
				default:
					patch := fmt.Sprintf(`{"data":{"v":"%d-%d"}}`, w, n)
					_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, srcName(i), "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
				}
				if err == nil {
					acked.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}

	// The faults. Sleeping here holds each fault for its duration; it does
	// not wait for the controller.
	hold := func(d time.Duration) { time.Sleep(d) }
	restart := func() {
		if err := env.StopAPIServer(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		hold(3 * time.Second)
		if err := env.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	hold(3 * time.Second)
	restart()
	hold(3 * time.Second)
	// Pause the controller, and restart the API server behind its back: the
	// paused watch's connection is gone, and by the time the controller
	// resumes, etcd has compacted past its last resourceVersion, so its
	// watch gets 410 Gone and it must relist.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	restart()
	hold(8 * time.Second)
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	lastFault := time.Now()
	hold(2 * time.Second)
	close(stop)
	writers.Wait()
	writesDone := time.Now()

	// Converged: every source has a mirror with its data, and no mirror
	// lacks a source.
	diff := func() (string, error) {
		list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		src, dst := map[string]string{}, map[string]string{}
		for _, cm := range list.Items {
			if name, ok := strings.CutPrefix(cm.Name, "dst-"); ok {
				dst[name] = cm.Data["v"]
			} else if cm.Labels["role"] == "src" {
				src[cm.Name] = cm.Data["v"]
			}
		}
		var problems []string
		for k, v := range src {
			if got, ok := dst[k]; !ok || got != v {
				problems = append(problems, fmt.Sprintf("%s: source %q, mirror %q (present %t)", k, v, got, ok))
			}
		}
		for k := range dst {
			if _, ok := src[k]; !ok {
				problems = append(problems, fmt.Sprintf("%s: mirror without source", k))
			}
		}
		if len(problems) > 0 {
			return fmt.Sprintf("%d differences, first: %s", len(problems), problems[0]), nil
		}
		return "", nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d, err := diff()
		if err == nil && d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged 2 minutes after the writes stopped: %v %s", err, d)
		}
		time.Sleep(100 * time.Millisecond) // polling the server
	}
	converged := time.Now()
	t.Logf("%d writes acknowledged, %d failed during outages", acked.Load(), failed.Load())
	t.Logf("converged %.1fs after the last fault, %.1fs after the writes stopped",
		converged.Sub(lastFault).Seconds(), converged.Sub(writesDone).Seconds())

	// The watch was lost and came back, and the pause made it relist.
	body := scrape(t, "http://"+addr+"/metrics")
	relists := regexp.MustCompile(`(?m)^ctrl_cache_relists_total\{cluster="",namespace="` + regexp.QuoteMeta(ns) + `",resource="configmaps"\} (\d+)`).FindStringSubmatch(body)
	if relists == nil || relists[1] == "0" {
		t.Errorf("ctrl_cache_relists_total: got %v, want at least one relist after the compaction", relists)
	}
	logMu.Lock()
	joined := strings.Join(logs, "\n")
	logMu.Unlock()
	for _, want := range []string{`"msg"="lost the watch; retrying"`, `"msg"="watch is back"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("controller logs lack %s", want)
		}
	}
	if n := strings.Count(joined, `"msg"="reconcile failed`); n > 20 {
		t.Errorf("got %d reconcile error lines, want outage errors summarized", n)
	}
	if testing.Verbose() {
		t.Logf("controller logs:\n%s", joined)
	}

	stdin.Close()
	select {
	case err := <-childDone:
		if err != nil {
			t.Errorf("controller exited with %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("the controller did not stop within a minute of its stdin closing")
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
