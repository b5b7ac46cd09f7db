package denied

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/apireq"
)

// Requests keeps what the API server refuses the manager's requests other
// than lists and watches, which their caches report: writes, uncached
// reads, Leases, Events, the reviews of secure metrics. A refusal is kept
// until the same verb on the same resource and namespace succeeds, or for
// Forget without a new one. The zero value logs nothing; it is safe for
// concurrent use.
type Requests struct {
	Log logr.Logger // receives a refusal when it starts, and every Reminder while it lasts

	any atomic.Bool // m has a refusal: only then is a success looked at
	mu  sync.Mutex
	m   map[request]*denial
}

// Forget is how long a refusal is reported after the last one: a request
// nobody sends again would otherwise be reported forever.
const Forget = 10 * time.Minute

// request is what a refusal is about: a verb on a resource (with its
// subresource, "widgets/status") in a namespace ("" for all, or none).
type request struct {
	verb        string
	resource    schema.GroupResource
	subresource string
	namespace   string
}

// Wrap returns rt, noting the answers it gets.
func (r *Requests) Wrap(rt http.RoundTripper) http.RoundTripper { return noting{rt, r} }

// noting notes the answers of the requests it sends.
type noting struct {
	rt http.RoundTripper
	r  *Requests
}

func (n noting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.rt.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || n.r.any.Load()) {
		if q, ok := parse(req); ok {
			n.r.note(q, resp.StatusCode)
		}
	}
	return resp, err
}

// WrappedRoundTripper lets client-go, and the connection check, find the
// transport below.
func (n noting) WrappedRoundTripper() http.RoundTripper { return n.rt }

func (r *Requests) note(q request, status int) {
	if status != http.StatusForbidden && (status < 200 || status > 299) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.m[q]
	switch {
	case status != http.StatusForbidden:
		if d != nil {
			delete(r.m, q)
			r.any.Store(len(r.m) > 0)
			r.Log.Info("allowed now", "verb", q.verb, "resource", q.resource.String(), "namespace", q.namespace)
		}
	case d == nil:
		if r.m == nil {
			r.m = map[request]*denial{}
		}
		r.m[q] = &denial{since: now, logged: now, count: 1}
		r.any.Store(true)
		r.Log.Error(nil, q.String()+": grant the RBAC rule")
	default:
		d.count++
		d.since = now // the last refusal, for Forget
		if now.Sub(d.logged) >= Reminder {
			d.logged = now
			r.Log.Error(nil, q.String()+": still forbidden", "attempts", d.count)
		}
	}
}

// Lines returns a line per refusal seen within Forget, sorted, each naming
// the rule to add.
func (r *Requests) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for q, d := range r.m {
		if time.Since(d.since) > Forget {
			delete(r.m, q)
			r.any.Store(len(r.m) > 0)
			continue
		}
		out = append(out, q.String())
	}
	slices.Sort(out)
	return out
}

// String names the refusal and the rule that allows the request.
func (q request) String() string {
	resource, what := q.resource.Resource, q.resource.String()
	if q.subresource != "" {
		resource += "/" + q.subresource
		what += "/" + q.subresource
	}
	rule := fmt.Sprintf(`{apiGroups: [%q], resources: [%q], verbs: [%q]}`, q.resource.Group, resource, q.verb)
	where, to := "", "a ClusterRole"
	if q.namespace != "" {
		where, to = fmt.Sprintf(" in namespace %q", q.namespace), fmt.Sprintf("a Role in namespace %q, or a ClusterRole,", q.namespace)
	}
	return fmt.Sprintf("forbidden to %s %s%s: add the rule %s to %s bound to the manager's identity", q.verb, what, where, rule, to)
}

// parse reads the verb, resource and namespace of a request to a resource,
// as the API server's authorizer does; ok is false for lists, watches (a
// cache reports its own) and paths that name no resource (discovery,
// /version).
func parse(req *http.Request) (request, bool) {
	i, ok := apireq.Parse(req)
	if !ok || i.Verb == "list" || i.Verb == "watch" {
		return request{}, false
	}
	return request{verb: i.Verb, resource: schema.GroupResource{Group: i.Group, Resource: i.Resource}, subresource: i.Subresource, namespace: i.Namespace}, true
}
