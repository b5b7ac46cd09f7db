package leader

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPodNamespace(t *testing.T) {
	defer func(f string) { namespaceFile = f }(namespaceFile)
	namespaceFile = filepath.Join(t.TempDir(), "namespace")
	if got := PodNamespace(); got != "" {
		t.Errorf("outside a pod: got %q, want none", got)
	}
	if err := os.WriteFile(namespaceFile, []byte("backup-system\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := PodNamespace(); got != "backup-system" {
		t.Errorf("got %q, want backup-system", got)
	}
}
