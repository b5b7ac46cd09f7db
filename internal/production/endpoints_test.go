package production_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
)

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
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func sample(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetricsAndEvents(t *testing.T) {
	ns := namespace(t)
	// Plain HTTP: what is served is checked here; who may read it, in
	// internal/integration's TestSecureMetrics.
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, MetricsAddress: "127.0.0.1:0",
		MetricsServing: ctrl.MetricsServing{Insecure: true}, LeaderElection: election("metrics", "only")})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ctrl.NewRecorder[*corev1.ConfigMap](mgr, "metrics-test")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ctrl.NewController(mgr, "metrics", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		rec.Event(cm, corev1.EventTypeNormal, "Reconciled", "seen by the metrics test")
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	url := "http://" + mgr.Addresses().Metrics + "/metrics"
	success := `controller_runtime_reconcile_total{controller="metrics",result="success"}`
	before := sample(t, scrape(t, url), success)

	createConfigMaps(t, ns, "m", 3)
	eventually(t, 10*time.Second, "three more successful reconciles", func() bool {
		return sample(t, scrape(t, url), success) >= before+3
	})
	body := scrape(t, url)
	for _, series := range []string{
		`leader_election_master_status{name="metrics"}`,
		`controller_runtime_max_concurrent_reconciles{controller="metrics"}`,
	} {
		if v := sample(t, body, series); v != 1 {
			t.Errorf("%s: got %v, want 1", series, v)
		}
	}
	if !regexp.MustCompile(`(?m)^rest_client_requests_total\{code="200",host="127\.0\.0\.1:\d+",method="GET"\} [1-9]`).MatchString(body) {
		t.Error("rest_client_requests_total has no successful GETs")
	}

	// Each reconcile emitted an event about its ConfigMap.
	cs := kubernetes.NewForConfigOrDie(env.Config())
	eventually(t, 20*time.Second, "three events on the server", func() bool {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Reason == "Reconciled" && e.InvolvedObject.Kind == "ConfigMap" && e.InvolvedObject.APIVersion == "v1" &&
				e.Source.Component == "metrics-test" && e.InvolvedObject.UID != "" {
				n++
			}
		}
		return n >= 3
	})
	var _ = fmt.Sprint
}
