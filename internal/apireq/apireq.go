// Package apireq reads what a request to the Kubernetes API does from its
// method and URL, as the API server's authorizer reads it, for the
// transports that look at requests: the refusals /readyz names, and
// ctrltest's perturbations.
package apireq

import (
	"net/http"
	"strings"
)

// Info is what a request does, to which objects.
type Info struct {
	Verb     string // get, list, watch, create, update, patch, delete, deletecollection
	Group    string // "" for the core group
	Version  string
	Resource string
	// Subresource is the part after the name, such as status.
	Subresource string
	Namespace   string
	Name        string // "" for a collection
}

// Parse reads req. ok is false for paths that name no resource
// (discovery, /version) and for methods the API gives no verb.
func Parse(req *http.Request) (q Info, ok bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		q.Version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		q.Group, q.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return q, false
	}
	// namespaces/NS/RESOURCE... is namespaced; namespaces/NS alone, or
	// with a subresource of its own (status, finalize), is a Namespace.
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		q.Namespace, parts = parts[1], parts[2:]
	}
	q.Resource = parts[0]
	if len(parts) >= 2 {
		q.Name = parts[1]
	}
	if len(parts) >= 3 {
		q.Subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch w := req.URL.Query().Get("watch"); {
		case w == "true" || w == "1":
			q.Verb = "watch"
		case q.Name == "":
			q.Verb = "list"
		default:
			q.Verb = "get"
		}
	case http.MethodPost:
		q.Verb = "create"
	case http.MethodPut:
		q.Verb = "update"
	case http.MethodPatch:
		q.Verb = "patch"
	case http.MethodDelete:
		q.Verb = "delete"
		if q.Name == "" {
			q.Verb = "deletecollection"
		}
	default:
		return q, false
	}
	return q, true
}
