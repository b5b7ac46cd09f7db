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
// (ShardedListAndWatch, alpha in Kubernetes 1.37).
var gated struct {
	once sync.Once
	env  *ctrltest.Env
	err  error
}

// gatedEnv returns the control plane with ShardedListAndWatch on.
func gatedEnv(t *testing.T) *ctrltest.Env {
	t.Helper()
	gated.once.Do(func() {
		gated.env, gated.err = ctrltest.New(ctrltest.Options{GenerateCRDs: true,
			APIServerFlags: []string{"--feature-gates=ShardedListAndWatch=true"}})
	})
	if gated.err != nil {
		t.Fatal(gated.err)
	}
	return gated.env
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
