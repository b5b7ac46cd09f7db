package denied_test

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/go-logr/logr/testr"
	"github.com/typedctrl/ctrl/internal/denied"
)

var widgets = schema.GroupResource{Group: "example.com", Resource: "widgets"}

func TestForbiddenNamesTheRule(t *testing.T) {
	no := apierrors.NewForbidden(widgets, "", errors.New("no"))
	for _, tt := range []struct {
		name   string
		target denied.Target
		verb   string
		want   string
	}{
		{"cluster-scoped", denied.Target{Resource: widgets}, "list",
			`forbidden to list widgets.example.com: add the rule {apiGroups: ["example.com"], resources: ["widgets"], verbs: ["list"]} to a ClusterRole bound to the manager's identity: widgets.example.com is forbidden: no`},
		{"all namespaces", denied.Target{Resource: widgets, Namespaced: true}, "watch",
			`forbidden to watch widgets.example.com in all namespaces: add the rule {apiGroups: ["example.com"], resources: ["widgets"], verbs: ["watch"]} to a ClusterRole bound to the manager's identity: widgets.example.com is forbidden: no`},
		{"one namespace of a member", denied.Target{Resource: widgets, Namespaced: true, Namespace: "ns", Cluster: "east"}, "list",
			`forbidden to list widgets.example.com in namespace "ns" of cluster "east": add the rule {apiGroups: ["example.com"], resources: ["widgets"], verbs: ["list"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity: widgets.example.com is forbidden: no`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var v denied.Verbs
			v.Start(context.Background(), testr.New(t), tt.target, nil)
			v.Note(tt.verb, no)
			err := v.Forbidden()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			if !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want it to wrap the server's answer", err)
			}
			v.Note(tt.verb, nil)
			if err := v.Forbidden(); err != nil {
				t.Errorf("after a permission got %v, want nil", err)
			}
		})
	}
}

func TestOtherErrorsChangeNothing(t *testing.T) {
	var v denied.Verbs
	v.Note("watch", apierrors.NewForbidden(widgets, "", errors.New("no")))
	v.Note("watch", errors.New("connection refused"))
	if v.ForbiddenTo("watch") == nil {
		t.Error("an outage cleared the refusal, want it kept")
	}
	if err := v.ForbiddenTo("list"); err != nil {
		t.Errorf("got %v for list, want nil", err)
	}
}

func TestProbeAsksOnce(t *testing.T) {
	var v denied.Verbs
	calls := 0
	ctx, cancel := context.WithCancel(context.Background())
	v.Start(ctx, testr.New(t), denied.Target{Resource: widgets}, func(context.Context) error {
		calls++
		return apierrors.NewForbidden(widgets, "", errors.New("no"))
	})
	v.Probe(ctx)
	v.Probe(ctx)
	cancel()
	v.Wait() // the recheck the refused list started ends with ctx
	if calls != 1 {
		t.Errorf("got %d lists, want 1", calls)
	}
	if v.ForbiddenTo("list") == nil {
		t.Error("got no refusal of list after a refused probe")
	}
}
