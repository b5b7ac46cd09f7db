package apireq

import (
	"net/http"
	"net/url"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        Info
		ok          bool
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=true", Info{Verb: "watch", Version: "v1", Resource: "configmaps", Namespace: "ns"}, true},
		{"GET", "/api/v1/namespaces/ns/configmaps", Info{Verb: "list", Version: "v1", Resource: "configmaps", Namespace: "ns"}, true},
		{"HEAD", "/api/v1/namespaces/ns/configmaps/a", Info{Verb: "get", Version: "v1", Resource: "configmaps", Namespace: "ns", Name: "a"}, true},
		{"PATCH", "/apis/example.ctrl.dev/v1/namespaces/ns/widgets/w/status", Info{Verb: "patch", Group: "example.ctrl.dev", Version: "v1", Resource: "widgets", Namespace: "ns", Name: "w", Subresource: "status"}, true},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", Info{Verb: "deletecollection", Version: "v1", Resource: "configmaps", Namespace: "ns"}, true},
		{"DELETE", "/api/v1/namespaces/ns", Info{Verb: "delete", Version: "v1", Resource: "namespaces", Name: "ns"}, true},
		{"PUT", "/api/v1/namespaces/ns/status", Info{Verb: "update", Version: "v1", Resource: "namespaces", Name: "ns", Subresource: "status"}, true},
		{"PUT", "/api/v1/namespaces/ns/finalize", Info{Verb: "update", Version: "v1", Resource: "namespaces", Name: "ns", Subresource: "finalize"}, true},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Info{Verb: "create", Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}, true},
		{"OPTIONS", "/api/v1/namespaces/ns/configmaps", Info{}, false},
		{"GET", "/version", Info{}, false},
		{"GET", "/apis/apps/v1", Info{}, false},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := Parse(&http.Request{Method: c.method, URL: u})
		if ok != c.ok || ok && got != c.want {
			t.Errorf("%s %s: got %+v, %v; want %+v, %v", c.method, c.url, got, ok, c.want, c.ok)
		}
	}
}
