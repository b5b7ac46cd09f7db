package ctrl_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// TestKubeconfigSecretsRefuseExecAndFiles: a kubeconfig Secret that names
// the operator's token file, or a command to run, is no member, and the
// log names the Secret, its key and the field; a Secret of inline
// credentials beside them is one. With AllowExecAndFiles all three are.
func TestKubeconfigSecretsRefuseExecAndFiles(t *testing.T) {
	const head = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://member.example:6443'}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	tokenFile := filepath.Join(t.TempDir(), "token") // the operator's ServiceAccount token, say
	must(t, os.WriteFile(tokenFile, []byte("operator"), 0o600))
	secrets := map[string]string{
		"inline": head + "users: [{name: u, user: {token: t}}]\n",
		"reads":  head + "users: [{name: u, user: {tokenFile: " + tokenFile + "}}]\n",
		"runs":   head + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: /bin/sh, args: [-c, 'exit 1']}}}]\n",
	}
	for _, allow := range []bool{false, true} {
		var objs []*corev1.Secret
		for name, kubeconfig := range secrets {
			objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name},
				Data: map[string][]byte{"kubeconfig": []byte(kubeconfig)}})
		}
		cs := fake.NewClientset(objs[0], objs[1], objs[2])
		logs := &logLines{}
		mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: cs, Logger: logs.logger(),
			ClusterProvider: ctrl.KubeconfigSecrets("fleet", nil, ctrl.KubeconfigOptions{AllowExecAndFiles: allow})})
		must(t, err)
		start(t, mgr)
		want := []string{"inline"}
		if allow {
			want = []string{"inline", "reads", "runs"}
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) { // polling the fleet and the log
			logged := logs.count(`fleet/reads, key \"kubeconfig\"`) > 0 && logs.count(`fleet/runs, key \"kubeconfig\"`) > 0
			if slices.Equal(mgr.Clusters(), want) && (allow || logged) {
				break
			}
			if time.Now().After(deadline) {
				logs.mu.Lock()
				all := strings.Join(logs.lines, "\n")
				logs.mu.Unlock()
				t.Fatalf("AllowExecAndFiles=%v: members %v, want %v; logged the refusals: %v\n%s", allow, mgr.Clusters(), want, logged, all)
			}
		}
		if allow {
			continue
		}
		for field, n := range map[string]int{`users[\"u\"].user.tokenFile`: 1, `users[\"u\"].user.exec`: 1} {
			if got := logs.count(field); got != n {
				t.Errorf("the log names %s %d times, want %d", field, got, n)
			}
		}
	}
}
