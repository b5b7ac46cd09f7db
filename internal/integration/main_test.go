// Package integration_test runs ctrl against a real kube-apiserver and etcd
// (package ctrltest): the API semantics the fakes only imitate, such as
// resource versions, generations, the status subresource, server-side apply,
// finalizers, and a server that goes away.
//
// Tests share one control plane and run one at a time, because
// TestAPIServerOutage stops its API server. Each test works in a namespace of
// its own, runs its managers scoped to it, and asserts what the server holds
// at the end, not only what the controller counted.
package integration_test

import (
	"context"
	"fmt"
	"os"
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

var (
	// env is the control plane of the suite, with widgetCRD installed.
	env *ctrltest.Env
	// clientset is the test's own client, outside every manager: its
	// writes are changes made by someone else, which WaitIdle does not
	// track.
	clientset kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	before := goleak.IgnoreCurrent()
	code := ctrltest.Run(m, ctrltest.Options{CRDs: [][]byte{[]byte(widgetCRD)}}, func(e *ctrltest.Env) (err error) {
		env = e
		clientset, err = kubernetes.NewForConfig(env.Config())
		return err
	})
	// Every manager is stopped by its test; whatever still runs leaked.
	if err := goleak.Find(append(leakIgnores(), before)...); err != nil {
		fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
		code = 1
	}
	return code
}

// leakIgnores are the goroutines that outlive a manager without being its
// own: the connections of client-go's process-wide transport cache, which
// every client made from an env's Config shares (a restarted API server
// means a new connection), the control plane's processes, which
// TestAPIServerOutage restarts, and the proxies of tests that cut
// connections.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("github.com/typedctrl/ctrl/ctrltest.startProcess.func1"),
		// A test's blackhole proxy, which outlives the manager behind it.
		goleak.IgnoreAnyFunction("github.com/typedctrl/ctrl/internal/integration_test.pipe"),
		goleak.IgnoreAnyFunction("github.com/typedctrl/ctrl/internal/integration_test.(*blackhole).accept"),
	}
}

// newNamespace creates a namespace for the calling test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := clientset.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}, metav1.CreateOptions{})
	must(t, err)
	return ns.Name
}

// newManager returns a manager of the namespace ns on env's API server.
func newManager(t *testing.T, ns string) *ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns})
	must(t, err)
	return mgr
}

// createConfigMaps creates n ConfigMaps in ns, the i-th made by object,
// from writers goroutines at once.
func createConfigMaps(t *testing.T, ns string, n, writers int, object func(i int) *corev1.ConfigMap) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if _, err := clientset.CoreV1().ConfigMaps(ns).Create(context.Background(), object(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// newClient returns the manager's client of T.
func newClient[T ctrl.Object](t *testing.T, mgr *ctrl.Manager) *ctrl.Client[T] {
	t.Helper()
	c, err := ctrl.NewClient[T](mgr, ctrl.ClientOptions{})
	must(t, err)
	return c
}

// start runs mgr until the test ends, and returns its context. At cleanup it
// cancels that context, requires Start to return nil, and checks that the
// manager left no goroutine behind.
func start(t *testing.T, mgr *ctrl.Manager) context.Context {
	t.Helper()
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: got %v, want nil after cancel", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("Start: still running a minute after cancel")
			return
		}
		goleak.VerifyNone(t, append(leakIgnores(), before)...)
	})
	return ctx
}

// waitIdle waits for mgr to be idle: every write made through its clients
// has been seen by its caches and reconciled, and nothing is due within a
// minute.
func waitIdle(t *testing.T, mgr *ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// eventually calls check until it returns nil, and returns how long that
// took. It fails the test with check's last error once timeout has passed.
// It waits for the server to reach a state, for changes that WaitIdle does
// not track: writes made by the test's own clientset, or a manager's
// recovery from a broken connection.
func eventually(t *testing.T, timeout time.Duration, check func() error) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(began)
		}
		if time.Since(began) > timeout {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(25 * time.Millisecond) // polling the server, not waiting for the controller
	}
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
