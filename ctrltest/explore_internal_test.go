package ctrltest

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
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
