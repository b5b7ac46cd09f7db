package rbac

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRules(t *testing.T) {
	var g Grants
	g.Need(schema.GroupResource{Group: "apps", Resource: "deployments"}, "watch", "list")
	g.Need(schema.GroupResource{Resource: "events"}, "create")
	g.Need(schema.GroupResource{Group: "apps", Resource: "deployments"}, "list", "patch")
	got := fmt.Sprint(g.Rules())
	want := "[{[create] [] [events] [] []} {[list patch watch] [apps] [deployments] [] []}]"
	if got != want {
		t.Errorf("rules:\n got %s\nwant %s", got, want)
	}
}
