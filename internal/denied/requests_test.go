package denied

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestRequestsNameTheRule sends requests that the server refuses, then
// allows, and checks the lines Requests keeps.
func TestRequestsNameTheRule(t *testing.T) {
	status := http.StatusForbidden
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	var r Requests
	c := &http.Client{Transport: r.Wrap(http.DefaultTransport)}
	send := func(method, path string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, tt := range []struct{ method, path, want string }{
		{"POST", "/api/v1/namespaces/ns/configmaps", `forbidden to create configmaps in namespace "ns": add the rule {apiGroups: [""], resources: ["configmaps"], verbs: ["create"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity`},
		{"PUT", "/apis/example.com/v1/namespaces/ns/widgets/w/status", `forbidden to update widgets.example.com/status in namespace "ns": add the rule {apiGroups: ["example.com"], resources: ["widgets/status"], verbs: ["update"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity`},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", `forbidden to create tokenreviews.authentication.k8s.io: add the rule {apiGroups: ["authentication.k8s.io"], resources: ["tokenreviews"], verbs: ["create"]} to a ClusterRole bound to the manager's identity`},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", `forbidden to get leases.coordination.k8s.io in namespace "ns": add the rule {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity`},
		{"PATCH", "/api/v1/namespaces/ns", `forbidden to patch namespaces: add the rule {apiGroups: [""], resources: ["namespaces"], verbs: ["patch"]} to a ClusterRole bound to the manager's identity`},
		{"PUT", "/api/v1/namespaces/ns/finalize", `forbidden to update namespaces/finalize: add the rule {apiGroups: [""], resources: ["namespaces/finalize"], verbs: ["update"]} to a ClusterRole bound to the manager's identity`},
		{"DELETE", "/api/v1/namespaces/ns/pods", `forbidden to deletecollection pods in namespace "ns": add the rule {apiGroups: [""], resources: ["pods"], verbs: ["deletecollection"]} to a Role in namespace "ns", or a ClusterRole, bound to the manager's identity`},
		{"GET", "/api/v1/namespaces/ns/configmaps", ""},        // a list: its cache reports it
		{"GET", "/apis/example.com/v1/widgets?watch=true", ""}, // a watch
		{"GET", "/apis/example.com/v1", ""},                    // discovery
		{"GET", "/version", ""},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r.m = nil
			status = http.StatusForbidden
			send(tt.method, tt.path)
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if got := r.Lines(); !slices.Equal(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
			status = http.StatusOK
			send(tt.method, tt.path)
			if got := r.Lines(); len(got) != 0 {
				t.Errorf("after a success got %q, want none", got)
			}
		})
	}
}

// TestWrapIsTransparent lets the connection check find the transport below
// the wrapper, as client-go's wrappers do.
func TestWrapIsTransparent(t *testing.T) {
	var r Requests
	base := &http.Transport{}
	w, ok := r.Wrap(base).(interface{ WrappedRoundTripper() http.RoundTripper })
	if !ok || w.WrappedRoundTripper() != base {
		t.Errorf("got %T, want a wrapper of the transport", r.Wrap(base))
	}
}
