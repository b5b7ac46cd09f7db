// Package production tests the manager's production features (leader
// election, HTTP endpoints, events) against a real kube-apiserver.
package production_test

import (
	"context"
	"os"
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
	if os.Getenv(shardChildEnv) != "" {
		os.Exit(runShardChild())
	}
	os.Exit(ctrltest.Run(m, ctrltest.Options{}, func(e *ctrltest.Env) error {
		env = e
		return nil
	}))
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
