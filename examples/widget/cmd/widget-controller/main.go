// Command widget-controller runs the Widget controller in a cluster, as
// the Deployment in examples/widget/config does: with leader election,
// metrics served over HTTPS to whom RBAC allows, health probes, and a
// clean shutdown on SIGTERM.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/examples/widget"
)

func main() {
	var f flags
	f.register(flag.CommandLine)
	flag.Parse()
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(f, log); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

// flags are the program's command line; their defaults are production's.
type flags struct {
	kubeconfig     string
	namespace      string
	metricsAddress string
	metricsSecure  bool
	metricsCertDir string
	healthAddress  string
	leaderElect    bool
	leaseNamespace string
	enableHTTP2    bool
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; default: in-cluster config, then $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&f.namespace, "namespace", "", "watch one namespace; default: all")
	fs.StringVar(&f.metricsAddress, "metrics-address", ":8443", "address of /metrics; empty: off")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve /metrics over HTTPS to clients RBAC allows to get it; false: plain HTTP to anyone")
	fs.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "directory of the metrics certificate (tls.crt, tls.key); default: self-signed")
	fs.StringVar(&f.healthAddress, "health-address", ":8081", "address of /healthz and /readyz; empty: off")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "run the controller only in the replica holding the Lease")
	fs.StringVar(&f.leaseNamespace, "lease-namespace", "", "namespace of the Lease; default: -namespace, else the pod's own")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "offer HTTP/2 on the metrics and webhook servers")
}

// options are the manager's options for f: the program runs with them, and
// TestManifests writes the manifests from them.
func options(f flags) ctrl.Options {
	opts := ctrl.Options{
		Namespace:      f.namespace,
		FieldManager:   "widget-controller",
		MetricsAddress: f.metricsAddress,
		MetricsServing: ctrl.MetricsServing{Insecure: !f.metricsSecure, CertDir: f.metricsCertDir},
		HealthAddress:  f.healthAddress,
		TLS:            ctrl.TLSOptions{HTTP2: f.enableHTTP2},
	}
	if f.leaderElect {
		opts.LeaderElection = ctrl.LeaderElection{Name: "widget-controller", LeaseOptions: ctrl.LeaseOptions{Namespace: f.leaseNamespace}}
	}
	return opts
}

func run(f flags, log logr.Logger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the client configuration: %w", err)
	}
	opts := options(f)
	opts.Config, opts.Logger = config, log
	mgr, err := ctrl.NewManager(opts)
	if err != nil {
		return err
	}
	if err := widget.Setup(mgr); err != nil {
		return fmt.Errorf("wiring the controller: %w", err)
	}
	return mgr.Start(ctrl.SignalContext())
}
