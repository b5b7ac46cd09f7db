package rbac

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
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

// TestAdd merges rules of resources into the verbs by resource, and keeps
// the others as given, once each.
func TestAdd(t *testing.T) {
	var g Grants
	g.Need(schema.GroupResource{Resource: "configmaps"}, "list", "watch")
	named := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"tls"}, Verbs: []string{"get"}}
	urls := rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}
	g.Add(rbacv1.PolicyRule{APIGroups: []string{"", "apps"}, Resources: []string{"configmaps", "deployments"}, Verbs: []string{"create"}}, named, urls, named)
	got := fmt.Sprint(g.Rules())
	want := "[{[create list watch] [] [configmaps] [] []} {[create] [] [deployments] [] []} " +
		"{[create] [apps] [configmaps] [] []} {[create] [apps] [deployments] [] []} " +
		"{[get] [] [secrets] [tls] []} {[get] [] [] [] [/metrics]}]"
	if got != want {
		t.Errorf("rules:\n got %s\nwant %s", got, want)
	}
}
