// Command widget-controller runs the Widget controller in a cluster: with
// leader election, metrics and health endpoints, and a clean shutdown on
// SIGTERM.
package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/examples/widget"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; default: in-cluster config, then $KUBECONFIG or ~/.kube/config")
	namespace := flag.String("namespace", "", "watch one namespace; default: all")
	metricsAddr := flag.String("metrics-address", ":8443", "address of /metrics; empty: off")
	metricsSecure := flag.Bool("metrics-secure", true, "serve /metrics over HTTPS to clients RBAC allows to get it; false: plain HTTP to anyone")
	metricsCertDir := flag.String("metrics-cert-dir", "", "directory of the metrics certificate (tls.crt, tls.key); default: self-signed")
	enableHTTP2 := flag.Bool("enable-http2", false, "offer HTTP/2 on the metrics and webhook servers")
	healthAddr := flag.String("health-address", ":8081", "address of /healthz and /readyz; empty: off")
	leaderElect := flag.Bool("leader-elect", true, "run the controller only in the replica holding the Lease")
	leaseNamespace := flag.String("lease-namespace", "", "namespace of the Lease; default: the watched namespace, or default")
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		log.Error(err, "loading the client configuration")
		os.Exit(1)
	}
	opts := ctrl.Options{
		Config:         config,
		Namespace:      *namespace,
		Logger:         log,
		FieldManager:   "widget-controller",
		MetricsAddress: *metricsAddr,
		MetricsServing: ctrl.MetricsServing{Insecure: !*metricsSecure, CertDir: *metricsCertDir},
		HealthAddress:  *healthAddr,
		TLS:            ctrl.TLSOptions{HTTP2: *enableHTTP2},
	}
	if *leaderElect {
		opts.LeaderElection = ctrl.LeaderElection{Name: "widget-controller", LeaseOptions: ctrl.LeaseOptions{Namespace: *leaseNamespace}}
	}
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	if err := widget.Setup(mgr); err != nil {
		log.Error(err, "wiring the controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SignalContext()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
