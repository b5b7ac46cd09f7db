package ctrltest

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestParseRequest reads what a request does to which object from its
// method and URL, and keeps only writes to the controllers' state.
func TestParseRequest(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        string // what(), or "" if not a resource
		write       bool
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5", "watch configmaps", false},
		{"GET", "/api/v1/namespaces/ns/configmaps", "list configmaps", false},
		{"GET", "/api/v1/namespaces/ns/configmaps/a", "get configmaps/a", false},
		{"POST", "/api/v1/namespaces/ns/configmaps", "create configmaps", true},
		{"PATCH", "/apis/example.ctrl.dev/v1/namespaces/ns/widgets/w/status", "patch widgets/w/status", true},
		{"PUT", "/apis/example.ctrl.dev/v1/namespaces/ns/widgets/w", "update widgets/w", true},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/a", "delete configmaps/a", true},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", "deletecollection configmaps", true},
		{"DELETE", "/api/v1/namespaces/ns", "delete namespaces/ns", true},
		{"PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/r", "patch clusterroles/r", true},
		{"POST", "/api/v1/namespaces/ns/events", "create events", false},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "update leases/l", false},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "create selfsubjectaccessreviews", false},
		{"GET", "/version", "", false},
		{"GET", "/apis/apps/v1", "", false},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		q, ok := parseRequest(&http.Request{Method: c.method, URL: u})
		switch {
		case c.want == "" && ok:
			t.Errorf("%s %s: got %q, want no resource", c.method, c.url, q.what())
		case c.want != "" && (!ok || q.what() != c.want || q.write() != c.write):
			t.Errorf("%s %s: got %q (ok %v), write %v; want %q, write %v", c.method, c.url, q.what(), ok, q.write(), c.want, c.write)
		}
	}
}

// TestJSONOnly asks for JSON wherever a client asked for protobuf, keeping
// the alternatives' parameters (metadata-only lists).
func TestJSONOnly(t *testing.T) {
	for in, want := range map[string]string{
		"application/vnd.kubernetes.protobuf,application/json": "application/json",
		"application/vnd.kubernetes.protobuf":                  "application/json",
		"application/json":                                     "application/json",
		"":                                                     "",
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
	} {
		if got := jsonOnly(in); got != want {
			t.Errorf("jsonOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEndState compares end states on what a controller decides: the
// server's metadata, the namespace, times and uids differ between runs by
// construction and are masked.
func TestEndState(t *testing.T) {
	obj := func(ns, uid, rv, phase string) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "a", "namespace": ns, "uid": uid, "resourceVersion": rv,
				"creationTimestamp": "2026-12-05T04:00:00Z", "generation": int64(3),
				"ownerReferences": []any{map[string]any{"name": "p", "uid": uid}},
				"annotations":     map[string]any{"ref": ns + "/b", "owner": uid}},
			"status": map[string]any{"phase": phase, "conditions": []any{map[string]any{"lastTransitionTime": "2026-12-05T04:00:01Z"}}},
		}
	}
	a := flatten(normalize(obj("explore-1", "0b7c2d6e-1f2a-4b3c-8d9e-0f1a2b3c4d5e", "10", "Ready"), "explore-1"))
	b := flatten(normalize(obj("explore-2", "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b", "99", "Ready"), "explore-2"))
	if d := diffStates(map[string]map[string]string{"x": a}, map[string]map[string]string{"x": b}, nil); len(d) != 0 {
		t.Errorf("got differences %v between runs that differ only in what the server sets", d)
	}
	c := flatten(normalize(obj("explore-3", "0b7c2d6e-1f2a-4b3c-8d9e-0f1a2b3c4d5e", "10", "Failed"), "explore-3"))
	d := diffStates(map[string]map[string]string{"x": a, "gone": a}, map[string]map[string]string{"x": c, "new": c}, nil)
	var got []string
	for _, x := range d {
		got = append(got, x.String())
	}
	want := []string{
		"gone: exists in the reference, not here",
		"new: exists here, not in the reference",
		`x: status.phase: reference "Ready", here "Failed"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	if d := diffStates(map[string]map[string]string{"x": a}, map[string]map[string]string{"x": c}, []string{"metadata"}); len(d) != 0 {
		t.Errorf("compared on metadata only, got %v", d)
	}
}

// TestSample keeps the first and the last plan of each kind in short mode,
// in order, and every plan otherwise.
func TestSample(t *testing.T) {
	var plans []plan
	for _, id := range []string{"crash-1", "crash-2", "crash-3", "stale-1", "unobserved-1", "unobserved-2"} {
		kind, _, _ := strings.Cut(id, "-")
		plans = append(plans, plan{id: id, kind: planKind(kind)})
	}
	ids := func(ps []plan) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.id)
		}
		return strings.Join(s, " ")
	}
	if got, want := ids(sample(plans, true)), "crash-1 crash-3 stale-1 unobserved-1 unobserved-2"; got != want {
		t.Errorf("short: got %s, want %s", got, want)
	}
	if got := ids(sample(plans, false)); got != ids(plans) {
		t.Errorf("got %s, want every plan", got)
	}
	if got, want := slug("patch widgets/greeting/status"), "patch-widgets-greeting-status"; got != want {
		t.Errorf("slug: got %s, want %s", got, want)
	}
}

// TestPlanByID reads back every kind of plan from its ID, as a replay
// does, and refuses IDs that name no plan.
func TestPlanByID(t *testing.T) {
	for _, want := range []plan{
		{id: "crash-after-patch-widgets-greeting-status-1", kind: kindCrash, point: "patch-widgets-greeting-status-1"},
		{id: "unobserved-configmaps-task-2", kind: kindUnobserved, point: "configmaps-task-2"},
		{id: "stale-configmaps-step-0", kind: kindStale, resource: "configmaps", step: 0},
		{id: "conflict-delete-configmaps-db-snapshot-3-1", kind: kindConflict, point: "delete-configmaps-db-snapshot-3-1"},
		{id: "throttled-update-widgets-a-12", kind: kindThrottled, point: "update-widgets-a-12"},
		{id: "gone-widgets.example.ctrl.dev-step-3", kind: kindGone, resource: "widgets.example.ctrl.dev", step: 3},
		{id: "restart-apiserver-step-1", kind: kindRestart, step: 1},
	} {
		got, ok := planByID(want.id)
		if !ok || got != want {
			t.Errorf("planByID(%q) = %+v, %v; want %+v", want.id, got, ok, want)
		}
	}
	for _, id := range []string{"", "crash-after-", "crash-after-patch-widgets", "stale-configmaps", "stale-step-1",
		"restart-apiserver-step-x", "restart-apiserver-configmaps-step-1", "explode-configmaps-1"} {
		if p, ok := planByID(id); ok {
			t.Errorf("planByID(%q) = %+v, want no plan", id, p)
		}
	}
}

// TestReplaySelection reads which plans go test's -run selects: none of
// the plans when it stops above them; a replay runs the plans it matches,
// else the plan its literal names, drawn or not, else it cannot run.
func TestReplaySelection(t *testing.T) {
	drawn := []plan{
		{id: "crash-after-patch-configmaps-a-1", kind: kindCrash, point: "patch-configmaps-a-1"},
		{id: "crash-after-patch-configmaps-a-2", kind: kindCrash, point: "patch-configmaps-a-2"},
		{id: "stale-configmaps-step-0", kind: kindStale, resource: "configmaps"},
	}
	const parent = "TestX/sub/plans"
	for _, c := range []struct {
		run  string
		want string // the plans run, or the reason it cannot
	}{
		{"", "all"},
		{"TestX", "all"},
		{"Plans|TestX", "all"},
		{"^TestX$/^sub$/^plans$", "all"},
		{"TestX/sub/plans/crash", "crash-after-patch-configmaps-a-1 crash-after-patch-configmaps-a-2"},
		{"^TestX$/^sub$/^plans$/^stale-configmaps-step-0$", "stale-configmaps-step-0"},
		{"TestY/x|TestX/sub/plans/^stale", "stale-configmaps-step-0"},
		{"^TestX$/^sub$/^plans$/^crash-after-delete-configmaps-b-3$", "crash-after-delete-configmaps-b-3"},
		{"^TestX$/^sub$/^plans$/^stale-configmaps-step-0$|^TestX$/^sub$/^plans$/^crash-after-delete-configmaps-b-3$",
			"stale-configmaps-step-0 crash-after-delete-configmaps-b-3"},
		{"^TestX$/^sub$/^plans$/^crash-after-delete$", `cannot: -run names plan "crash-after-delete", which is no plan's ID`},
		{"TestX/sub/plans/nothing", `cannot: -run selects none of the 3 plans this run's reference drew (pattern "nothing")`},
	} {
		patterns := planPatterns(c.run, parent)
		got := "all"
		if patterns != nil {
			ps, why := replayed(drawn, patterns)
			got = strings.Join(ids(ps, 10), " ")
			if why != "" {
				got = "cannot: " + why
			}
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("-run %q: got %s, want %s", c.run, got, c.want)
		}
	}
}

// TestReplayCommand names the package, so the command runs from anywhere
// in the module, and quotes the test's name.
func TestReplayCommand(t *testing.T) {
	got := replayCommand("TestX/plans/crash-after-patch-a.b-1")
	want := "go test -count=1 -run '^TestX$/^plans$/^crash-after-patch-a\\.b-1$' github.com/typedctrl/ctrl/ctrltest"
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestSummary counts the plans run, injected and found by kind, in the
// order plans are drawn.
func TestSummary(t *testing.T) {
	s := summary{drawn: 9}
	s.add(kindStale, true, true)
	s.add(kindCrash, true, false)
	s.add(kindCrash, false, false)
	s.add(kindUnobserved, false, false)
	want := "plans: 9 drawn, 4 run, 2 injected; findings: 1; by kind (run/injected/findings): crash 2/1/0, unobserved 1/0/0, stale 1/1/1"
	if got := s.String(); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// TestStuck ends a settling once a key fails again and again with the
// same error while nothing changes for longer than the floor, and not
// before: a change or another error starts the count again.
func TestStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const key, e = `controller "c": ns/a`, "not found"
		s := newStuck(2 * time.Second)
		s.changed()
		for range 3 {
			s.failed(key, e)
		}
		if why := s.verdict(); why != "" {
			t.Fatalf("stuck at once: %s", why)
		}
		time.Sleep(time.Second)
		s.failed(key, e)
		s.changed() // an event: the next retry may succeed
		time.Sleep(3 * time.Second)
		s.failed(key, e)
		s.failed(key, "another error")
		s.failed(key, "another error")
		if why := s.verdict(); why != "" {
			t.Fatalf("stuck after a change and another error: %s", why)
		}
		s.failed(key, "another error")
		want := `controller "c": ns/a failed 3 times in a row with the same error while nothing changed for 3s`
		if why := s.verdict(); !strings.HasPrefix(why, want) {
			t.Fatalf("got %q, want %q", why, want)
		}
		ctx, stop := s.watch(t.Context())
		defer stop()
		<-ctx.Done()
		if err := context.Cause(ctx); !strings.Contains(err.Error(), want) {
			t.Errorf("the wait ended with %v, want %q", err, want)
		}
		s.changed()
		if why := s.verdict(); why != "" {
			t.Errorf("still stuck after a change: %s", why)
		}
		if got, want := s.longestQuiet(), 3*time.Second+10*time.Millisecond; got != want {
			t.Errorf("longest quiet: got %s, want %s (the stuck wait, and the watch's tick)", got, want)
		}
		never := newStuck(0)
		time.Sleep(time.Minute)
		for range 5 {
			never.failed(key, e)
		}
		if why := never.verdict(); why != "" {
			t.Errorf("stuck with no floor: %s", why)
		}
	})
	for _, c := range []struct{ ref, settle, want time.Duration }{
		{0, time.Minute, time.Second},
		{2 * time.Second, time.Minute, 4 * time.Second},
		{3 * time.Second, 5 * time.Second, 0},
		{0, time.Second, 0},
	} {
		if got := quietFloor(c.ref, c.settle); got != c.want {
			t.Errorf("quietFloor(%s, %s) = %s, want %s", c.ref, c.settle, got, c.want)
		}
	}
}
