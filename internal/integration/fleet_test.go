package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// auditPolicy records when each request for ConfigMaps arrives.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["configmaps"]}]
- level: None
`

// TestFleetRelistSpread runs a fleet of managers against one API server
// and restarts it. Each manager's cache must list again (its watch position
// died with the server's watch cache), and the fleet must not do it in one
// burst the moment the server is back: the lists must be spread over time.
// The API server's audit log says when each list arrived.
func TestFleetRelistSpread(t *testing.T) {
	const fleet = 20
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.log")
	must(t, os.WriteFile(policy, []byte(auditPolicy), 0o600))
	env4, err := ctrltest.New(ctrltest.Options{APIServerFlags: []string{
		"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog, "--audit-log-mode=blocking",
	}})
	must(t, err)
	t.Cleanup(func() { must(t, env4.Stop()) })
	cs, err := kubernetes.NewForConfig(env4.Config())
	must(t, err)
	ctx := context.Background()
	// The fleet stops together: a manager's goroutines are not another's
	// leak.
	before := goleak.IgnoreCurrent()
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	t.Cleanup(func() {
		stop()
		running.Wait()
		goleak.VerifyNone(t, append(leakIgnores(), before)...)
	})
	var mgrs []*ctrl.Manager
	for i := range fleet {
		ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}, metav1.CreateOptions{})
		must(t, err)
		_, err = cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i)}}, metav1.CreateOptions{})
		must(t, err)
		mgr, err := ctrl.NewManager(ctrl.Options{Config: env4.Config(), Namespace: ns.Name})
		must(t, err)
		_, err = ctrl.NewController(mgr, "fleet", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
			return ctrl.Result{}, nil
		}, ctrl.ControllerOptions{})
		must(t, err)
		running.Go(func() {
			if err := mgr.Start(runCtx); err != nil {
				t.Errorf("Start: %v", err)
			}
		})
		mgrs = append(mgrs, mgr)
	}
	for _, mgr := range mgrs {
		waitIdle(t, mgr)
	}

	// Writes none of the fleet's watches carries, just before the kill:
	// the restarted server's watch cache begins after every cache's
	// resourceVersion, so each must list again. A cache can resume from
	// the revision just before the server's oldest, and a bookmark carries
	// the server's latest revision to any watch: with one write, a cache
	// whose last bookmark came after the fleet went idle would resume; with
	// two, only one whose bookmark fell between them.
	for range 2 {
		_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bump-"}}, metav1.CreateOptions{})
		must(t, err)
	}
	must(t, env4.StopAPIServer())
	killed := time.Now()
	// Hold the outage: the fault being injected, not a wait for the fleet.
	time.Sleep(3 * time.Second)
	must(t, env4.StartAPIServer())
	ready := time.Now()
	// Every cache lists again and then watches.
	eventually(t, time.Minute, func() error {
		if n := len(relists(t, auditLog, killed)); n < fleet {
			return fmt.Errorf("%d relists after the restart, want at least %d", n, fleet)
		}
		return nil
	})
	for _, mgr := range mgrs {
		waitIdle(t, mgr)
	}

	var offsets []time.Duration
	for _, at := range relists(t, auditLog, killed) {
		offsets = append(offsets, at.Sub(ready))
	}
	slices.Sort(offsets)
	q := func(p float64) time.Duration { return offsets[int(p*float64(len(offsets)-1))].Round(time.Millisecond) }
	// The server answers some requests before its /readyz does.
	t.Logf("%d relists after the restart, relative to the API server's /readyz: first %s, 10%% %s, median %s, 90%% %s, last %s",
		len(offsets), q(0), q(0.1), q(0.5), q(0.9), q(1))
	hist := map[time.Duration]int{}
	for _, o := range offsets {
		hist[o.Truncate(250*time.Millisecond)]++
	}
	busiest := 0
	for _, n := range hist {
		busiest = max(busiest, n)
	}
	t.Logf("relists per 250 ms: %v", hist)
	if spread := offsets[int(0.9*float64(len(offsets)-1))] - offsets[int(0.1*float64(len(offsets)-1))]; spread < 500*time.Millisecond {
		t.Errorf("80%% of the fleet's relists came within %s, want them spread over at least 500ms", spread)
	}
	if busiest > len(offsets)/2 {
		t.Errorf("%d of %d relists came within one 250 ms, want at most half", busiest, len(offsets))
	}
}

// relists returns when each list of ConfigMaps arrived at the API server
// since since: LIST requests, and watches that begin with the list
// (sendInitialEvents, client-go's streaming list).
func relists(t *testing.T, auditLog string, since time.Time) []time.Time {
	t.Helper()
	f, err := os.Open(auditLog)
	must(t, err)
	defer f.Close()
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb                     string    `json:"verb"`
			RequestURI               string    `json:"requestURI"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
			User                     struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.RequestReceivedTimestamp.Before(since) {
			continue
		}
		// A list of one object is the probe that precedes a relist after
		// an outage.
		list := ev.Verb == "list" && !strings.Contains(ev.RequestURI, "limit=1&") && !strings.HasSuffix(ev.RequestURI, "limit=1") ||
			ev.Verb == "watch" && strings.Contains(ev.RequestURI, "sendInitialEvents=true")
		if list && strings.Contains(ev.RequestURI, "/namespaces/fleet-") {
			out = append(out, ev.RequestReceivedTimestamp)
		}
	}
	must(t, sc.Err())
	return out
}
