// Package production tests the manager's production features (leader
// election, HTTP endpoints, events) against a real kube-apiserver.
package production_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl/ctrltest"
)

var env *ctrltest.Env

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := ctrltest.Run(m, ctrltest.Options{GenerateCRDs: true}, func(e *ctrltest.Env) error {
		env = e
		return nil
	})
	if gated.env != nil {
		if err := gated.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// gated is a second control plane, started by the first test that needs
// it, whose API server selects lists and watches by hash
// (ShardedListAndWatch, alpha since Kubernetes 1.36).
var gated struct {
	once sync.Once
	env  *ctrltest.Env
	err  error
}

// gatedEnv returns the control plane with ShardedListAndWatch on, and
// true; or, where the API server's release has no such feature (before
// 1.36: `make test-skew`), the default one, where rings fall back to
// label mode, and false.
func gatedEnv(t *testing.T) (*ctrltest.Env, bool) {
	t.Helper()
	if serverMinor(t, env) < 36 {
		return env, false
	}
	gated.once.Do(func() {
		gated.env, gated.err = ctrltest.New(ctrltest.Options{GenerateCRDs: true,
			APIServerFlags: []string{"--feature-gates=ShardedListAndWatch=true"}})
	})
	if gated.err != nil {
		t.Fatal(gated.err)
	}
	return gated.env, true
}

// serverMinor returns the minor version of e's API server.
func serverMinor(t *testing.T, e *ctrltest.Env) int {
	t.Helper()
	info, err := discovery.NewDiscoveryClientForConfigOrDie(e.Config()).ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		t.Fatalf("the API server's version: %v", err)
	}
	return int(v.Minor())
}

// namespace creates a namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "prod-"}}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
