package scaffold

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		kind                                       string
		plural, lower, varName, varPlural, article string
	}{
		{"Backup", "backups", "backup", "backup", "backups", "a"},
		{"Policy", "policies", "policy", "policy", "policies", "a"},
		{"Gateway", "gateways", "gateway", "gateway", "gateways", "a"},
		{"Index", "indexes", "index", "index", "indexes", "an"},
		{"Match", "matches", "match", "match", "matches", "a"},
		{"URLMap", "urlmaps", "urlmap", "urlMap", "urlMaps", "a"},
		{"Type", "types", "type", "typeObj", "typesClient", "a"}, // a keyword, and an import of the tests
		{"Map", "maps", "map", "mapObj", "mapsClient", "a"},
	} {
		d := dataFor("example.com/op", Kind{Group: "backup.example.com", Version: "v1", Kind: tt.kind})
		got := []string{d.Plural, d.Lower, d.Var, d.VarPlural, d.Article}
		want := []string{tt.plural, tt.lower, tt.varName, tt.varPlural, tt.article}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %q, want %q", tt.kind, got, want)
		}
	}
	if d := dataFor("example.com/my.Operator_v2", Kind{Group: "my-group.example.com", Version: "v1beta1", Kind: "A"}); d.Name != "my-operator-v2" || d.Alias != "mygroupv1beta1" {
		t.Errorf("got name %q, alias %q; want my-operator-v2, mygroupv1beta1", d.Name, d.Alias)
	}
}

func TestKindCheck(t *testing.T) {
	for _, tt := range []struct {
		k    Kind
		want string
	}{
		{Kind{Group: "backup.example.com", Version: "v1", Kind: "backup"}, `kind "backup": want a Go type name in UpperCamelCase`},
		{Kind{Group: "backup.example.com", Version: "1", Kind: "Backup"}, `version "1": want a Kubernetes API version`},
		{Kind{Group: "backup", Version: "v1", Kind: "Backup"}, `group "backup": want a DNS subdomain with a dot`},
	} {
		if err := tt.k.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tt.k, err, tt.want)
		}
	}
}

// TestInitRefuses runs nothing in a directory that holds a project.
func TestInitRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := Init(dir, "example.com/op", Kind{Group: "backup.example.com", Version: "v1", Kind: "Backup"}, Ctrl{Version: "v1.0.0"},
		func(Command) error { ran = true; return nil })
	if err == nil || !strings.Contains(err.Error(), "holds main.go: init writes a new module into an empty directory") || ran {
		t.Errorf("got %v (ran commands: %t), want a refusal naming main.go", err, ran)
	}
}

// TestAddSetup adds setup functions above the marker, and says what to do
// without it.
func TestAddSetup(t *testing.T) {
	dir := t.TempDir()
	fs := files{}
	if err := fs.render("internal/controller/setup.go", "setup.go.tmpl", data{}); err != nil {
		t.Fatal(err)
	}
	if err := fs.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"SetupBackup", "SetupBackupWebhooks"} {
		if err := addSetup(dir, fn); err != nil {
			t.Fatal(err)
		}
	}
	src, _ := os.ReadFile(filepath.Join(dir, "internal/controller/setup.go"))
	if want := "\t\tSetupBackup,\n\t\tSetupBackupWebhooks,\n\t\t" + setupMarker; !strings.Contains(string(src), want) {
		t.Errorf("got\n%s\nwant it to contain\n%s", src, want)
	}
	if err := fs.write(dir); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("writing again: got %v, want an error", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "internal/controller/setup.go"), []byte("package controller\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := addSetup(dir, "SetupOther"); err == nil || !strings.Contains(err.Error(), "add SetupOther to what Setup runs yourself") {
		t.Errorf("got %v, want an error saying what to do", err)
	}
}
