// Package mirror is what the mirror controllers of the fault benchmark
// (cmd/faults) share. cmd/mirror-ctrl, cmd/mirror-cr and cmd/mirror-raw are
// the same controller written with ctrl, controller-runtime and client-go:
// for every ConfigMap labeled role=src in its namespace it keeps a ConfigMap
// dst-<name> with the same data, written with server-side apply, and deletes
// dst-<name> once the source is gone. Each runs 4 workers and leaves
// everything else, backoffs included, at its library's defaults.
//
// A mirror binary takes -kubeconfig and -namespace, logs to standard error,
// and stops when its standard input reaches end of file or on SIGTERM.
package mirror

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

const (
	// SourceLabel and SourceValue mark the ConfigMaps to mirror.
	SourceLabel, SourceValue = "role", "src"
	// SourceSelector selects the ConfigMaps to mirror, in kubectl's -l syntax.
	SourceSelector = SourceLabel + "=" + SourceValue
	// FieldManager owns the mirrors' data.
	FieldManager = "mirror"
	// Workers is how many sources each controller reconciles at once.
	Workers = 4
)

// Name returns the name of the mirror of the source named src.
func Name(src string) string { return "dst-" + src }

// Program is one mirror binary's setup.
type Program struct {
	Name      string
	Namespace string
	Config    *rest.Config
	// Ctx is canceled when standard input reaches end of file or on SIGINT
	// or SIGTERM: stop then.
	Ctx context.Context
}

// Begin parses the flags. Call it first thing in main. client-go's klog
// output goes to standard error at -v=4 by default, which shows the
// reflectors' list, watch and 410 Gone lines.
func Begin(name string) *Program {
	klog.InitFlags(nil)
	_ = flag.Set("v", "4")
	p := &Program{Name: name}
	kubeconfig := flag.String("kubeconfig", "", "path of the kubeconfig file")
	flag.StringVar(&p.Namespace, "namespace", "faults", "namespace of the ConfigMaps")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		p.Fatal(err)
	}
	// The same client limits for every implementation, high enough that
	// none is throttled on the client side: the libraries' defaults differ
	// (client-go 5 QPS, ctrl 20, controller-runtime's GetConfig none).
	cfg.QPS, cfg.Burst = 1000, 2000
	p.Config = cfg
	ctx, _ := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	p.Ctx = ctx
	return p
}

// Logger returns a logger that writes one line per entry, with the time, to
// standard error, up to verbosity v.
func (p *Program) Logger(v int) logr.Logger {
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if prefix != "" {
			prefix += ": "
		}
		fmt.Fprintf(os.Stderr, "%s %s%s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: v})
}

// Fatal reports err and exits.
func (p *Program) Fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", p.Name, err)
	os.Exit(1)
}
