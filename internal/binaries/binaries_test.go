package binaries

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKubernetesVersion(t *testing.T) {
	for _, tt := range []struct{ clientGo, want, wantErr string }{
		{clientGo: "v0.37.2", want: "v1.37.2"},
		{clientGo: "v0.38.0-rc.1", want: "v1.38.0-rc.1"},
		{clientGo: "v1.5.2", wantErr: `k8s.io/client-go "v1.5.2" is not a release of the form v0.X.Y`},
		{clientGo: "", wantErr: `k8s.io/client-go "" is not a release of the form v0.X.Y`},
	} {
		got, err := KubernetesVersion(tt.clientGo)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("KubernetesVersion(%q): got %q, %v; want error %q", tt.clientGo, got, err, tt.wantErr)
			}
		} else if err != nil || got != tt.want {
			t.Errorf("KubernetesVersion(%q): got %q, %v; want %q", tt.clientGo, got, err, tt.want)
		}
	}
}

func TestToolsGoMod(t *testing.T) {
	kubeGoMod := `// generated
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
	go.etcd.io/etcd/client/v3 v3.7.0
	go.etcd.io/etcd/server/v3 v3.7.1 // indirect
)

require k8s.io/api v0.0.0

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
	example.com/fork => example.com/other v1.0.0
)

replace k8s.io/kms => ./staging/src/k8s.io/kms
`
	got, err := toolsGoMod("v1.37.2", []byte(kubeGoMod))
	if err != nil {
		t.Fatal(err)
	}
	want := "module github.com/typedctrl/ctrl/hack/controlplane\n\ngo 1.26.0\n\n" +
		"tool k8s.io/kubernetes/cmd/kube-apiserver\n\n" +
		"require (\n\tgo.etcd.io/etcd/server/v3 v3.7.1\n\tk8s.io/kubernetes v1.37.2\n)\n\n" +
		replaceComment +
		"replace (\n" +
		"\tk8s.io/api => k8s.io/api v0.37.2\n" +
		"\tk8s.io/client-go => k8s.io/client-go v0.37.2\n" +
		"\tk8s.io/kms => k8s.io/kms v0.37.2\n" +
		")\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := toolsGoMod("v1.37.2", []byte("module k8s.io/kubernetes\n\ngo 1.26.0\n")); err == nil ||
		err.Error() != "its go.mod does not require go.etcd.io/etcd/server/v3" {
		t.Errorf("without etcd: got %v, want an error naming etcd", err)
	}
}

func TestVersionFlags(t *testing.T) {
	got := versionFlags("v1.37.2", time.Date(2026, 11, 12, 13, 14, 15, 0, time.FixedZone("", 3600)))
	want := "-s -w" +
		" -X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1" +
		" -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitCommit=" +
		" -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=2026-11-12T12:14:15Z" +
		" -X k8s.io/client-go/pkg/version.gitVersion=v1.37.2 -X k8s.io/client-go/pkg/version.gitMajor=1" +
		" -X k8s.io/client-go/pkg/version.gitMinor=37 -X k8s.io/client-go/pkg/version.gitCommit=" +
		" -X k8s.io/client-go/pkg/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.buildDate=2026-11-12T12:14:15Z"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestGenerateMatchesHack checks that hack/controlplane, which ctrl's own
// build uses, is what Generate writes for ctrl's k8s.io/client-go, so that
// users build what ctrl's tests run on. It resolves the module through the
// module cache, which `make controlplane` has filled.
func TestGenerateMatchesHack(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	clientGo, err := ClientGoVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := KubernetesVersion(clientGo)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var log strings.Builder
	if err := Generate(dir, kube, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, name := range []string{"go.mod", "go.sum", filepath.Join("etcd", "main.go")} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, "hack", "controlplane", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("hack/controlplane/%s differs from what Generate writes for Kubernetes %s; to regenerate it:\n"+
				"\trm hack/controlplane/go.mod hack/controlplane/go.sum && make controlplane", name, kube)
		}
	}
}
