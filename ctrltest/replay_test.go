package ctrltest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// helperEnv makes TestExploreHelper run Explore, in a test binary that
// TestExploreReplays starts as go test would.
const helperEnv = "CTRLTEST_EXPLORE_HELPER"

// TestExploreHelper is the search TestExploreReplays runs in a test binary
// of its own: the buggy retire controller (a crash plan finds it), beside a
// controller that creates a marker ConfigMap only in the reference runs
// (the first two managers), so that a replay of the crash after that write
// never gets there.
func TestExploreHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestExploreReplays")
	}
	env := ctrltest.Start(t, ctrltest.Options{})
	x := retire(false)
	var managers atomic.Int32
	setup := x.Setup
	x.Setup = func(mgr *ctrl.Manager) error {
		if managers.Add(1) <= 2 {
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			_, err = ctrl.NewController(mgr, "marker", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				if cm.Name != "job" {
					return ctrl.Result{}, nil
				}
				marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: "marker"}}
				_, err := cms.Create(ctx, marker)
				if apierrors.IsAlreadyExists(err) {
					err = nil
				}
				return ctrl.Result{}, err
			}, ctrl.ControllerOptions{})
			if err != nil {
				return err
			}
		}
		return setup(mgr)
	}
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	x.Objects = []ctrltest.ObjectRef{{Resource: cm, Name: "job"}, {Resource: cm, Name: "job-child"}} // not the marker
	ctrltest.Explore(t, env, x)
}

// TestExploreReplays runs Explore as a user does, in a test binary without
// -v: the search ends with a line of what it tested, a finding prints the
// command that replays it from anywhere in the module, the replay
// reproduces it, and a replay whose plan injects nothing (its write did not
// happen in this run, or the reference never drew it) fails saying so.
func TestExploreReplays(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper's run")
	}
	run := func(t *testing.T, pattern string) (string, bool) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", pattern, "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"=1")
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("running the helper: %v", err)
		}
		return string(out), err == nil
	}
	const finding = "crash-after-delete-configmaps-job-child-1"
	replay := "^TestExploreHelper$/^plans$/^" + finding + "$"
	summary := regexp.MustCompile(`(?m)^ctrltest: TestExploreHelper: plans: (\d+) drawn, (\d+) run, (\d+) injected; findings: (\d+); by kind \(run/injected/findings\): crash \d+/\d+/\d+, `)
	// Each runs a control plane of its own: side by side.
	t.Run("search", func(t *testing.T) {
		t.Parallel()
		out, ok := run(t, "^TestExploreHelper$")
		m := summary.FindStringSubmatch(out)
		switch {
		case ok:
			t.Fatalf("the search passed, want the finding of %s:\n%s", finding, out)
		case m == nil:
			t.Errorf("no summary line in the output:\n%s", out)
		case m[1] != m[2] || m[4] != "1" || m[3] == m[2]:
			t.Errorf("summary %q: want every plan run, one finding, and the marker's plan not injected", m[0])
		}
		want := "replay: go test -count=1 -run '" + replay + "' github.com/typedctrl/ctrl/ctrltest\n"
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	})
	t.Run("replays", func(t *testing.T) {
		t.Parallel()
		marker := "^TestExploreHelper$/^plans$/^crash-after-create-configmaps-marker-1$"
		undrawn := "^TestExploreHelper$/^plans$/^crash-after-patch-configmaps-nothing-1$"
		out, ok := run(t, replay+"|"+marker+"|"+undrawn)
		for _, want := range []string{
			"plan " + finding + ": crashed the manager after delete configmaps/job-child #1",
			"plan crash-after-create-configmaps-marker-1: nothing was injected: its point (a crash after the manager's write create-configmaps-marker-1) did not come in this run",
			"plan crash-after-patch-configmaps-nothing-1 is not among the plans this run's reference drew",
			"plan crash-after-patch-configmaps-nothing-1: nothing was injected",
			"ctrltest: TestExploreHelper: plans: ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q:\n%s", want, out)
			}
		}
		if ok {
			t.Errorf("the replays passed, want them to fail")
		}
	})
	t.Run("passes", func(t *testing.T) {
		t.Parallel()
		out, ok := run(t, "^TestExploreHelper$/^plans$/^stale-configmaps-step-0$")
		want := regexp.MustCompile(`(?m)^ctrltest: TestExploreHelper: plans: \d+ drawn, 1 run, 1 injected; findings: 0; by kind \(run/injected/findings\): stale 1/1/0$`)
		if !ok || !want.MatchString(out) {
			t.Errorf("a replay that injects and agrees with the reference: got ok %v, want a pass with its summary printed without -v:\n%s", ok, out)
		}
	})
}
