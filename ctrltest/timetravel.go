package ctrltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// A time-travel plan (Sieve's third pattern) serves the manager that
// replaces a crashed one an older state of a resource, as an API server of
// a highly available control plane that lags the others does: its lists
// are answered with the state the run recorded at the start of an earlier
// step, and its watches resume from there, their events held back until
// the managers are idle on that view; then it catches up.

// snapshot is a resource's objects at one resourceVersion, as recorded.
type snapshot struct {
	resource   string
	rv         string
	apiVersion string // of the objects
	kind       string // of the objects
	items      []map[string]any
}

// record lists a resource the managers watch, past the perturbations, as
// the state a time-travel plan serves later. ok is false if no manager
// watched it yet.
func (p *perturber) record(ctx context.Context, cfg *rest.Config, resource string) (_ *snapshot, ok bool, _ error) {
	p.mu.Lock()
	q, ok := p.lists[resource]
	p.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, true, err
	}
	nri := dc.Resource(schema.GroupVersionResource{Group: q.group, Version: q.version, Resource: q.resource})
	var ri dynamic.ResourceInterface = nri
	if q.namespace != "" {
		ri = nri.Namespace(q.namespace)
	}
	l, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, true, fmt.Errorf("recording the state of %s: %w", resource, err)
	}
	s := &snapshot{resource: resource, rv: l.GetResourceVersion(), apiVersion: l.GetAPIVersion(), kind: strings.TrimSuffix(l.GetKind(), "List")}
	for _, it := range l.Items {
		s.items = append(s.items, it.Object)
	}
	return s, true, nil
}

// object reads what the perturbations need of an object.
func object(it map[string]any) (md map[string]any, name, ns string, lbls map[string]string, rv int64) {
	md, _ = it["metadata"].(map[string]any)
	name, _ = md["name"].(string)
	ns, _ = md["namespace"].(string)
	lbls = map[string]string{}
	if l, ok := md["labels"].(map[string]any); ok {
		for k, v := range l {
			lbls[k], _ = v.(string)
		}
	}
	s, _ := md["resourceVersion"].(string)
	rv, _ = strconv.ParseInt(s, 10, 64)
	return md, name, ns, lbls, rv
}

// selected returns the objects a list or watch request selects, as its
// Accept header asks for them: whole, or their metadata alone.
func (s *snapshot) selected(r *http.Request) []map[string]any {
	query := r.URL.Query()
	lsel, _ := labels.Parse(query.Get("labelSelector"))
	fsel, _ := fields.ParseSelector(query.Get("fieldSelector"))
	meta := strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata")
	var out []map[string]any
	for _, it := range s.items {
		md, name, ns, lbls, _ := object(it)
		if lsel != nil && !lsel.Matches(labels.Set(lbls)) || fsel != nil && !fsel.Matches(fields.Set{"metadata.name": name, "metadata.namespace": ns}) {
			continue
		}
		if meta {
			it = map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": md}
		}
		out = append(out, it)
	}
	return out
}

// list answers a list request with the snapshot.
func (s *snapshot) list(r *http.Request) *http.Response {
	apiVersion, kind := s.apiVersion, s.kind+"List"
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		apiVersion, kind = "meta.k8s.io/v1", "PartialObjectMetadataList"
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"resourceVersion": s.rv}, "items": s.selected(r)})
	return answer(r, http.StatusOK, string(b))
}

// initial returns the frames a watch that sends initial events starts
// with: the snapshot's objects, then the bookmark that ends them.
func (s *snapshot) initial(r *http.Request) []frame {
	var out []frame
	for _, it := range s.selected(r) {
		raw, _ := json.Marshal(map[string]any{"type": "ADDED", "object": it})
		md, _ := it["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		rv, _ := md["resourceVersion"].(string)
		out = append(out, frame{raw: raw, typ: "ADDED", name: name, rv: rv})
	}
	apiVersion, kind := s.apiVersion, s.kind
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		apiVersion, kind = "meta.k8s.io/v1", "PartialObjectMetadata"
	}
	raw, _ := json.Marshal(map[string]any{"type": "BOOKMARK", "object": map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"resourceVersion": s.rv, "annotations": map[string]any{metav1.InitialEventsAnnotationKey: "true"}}}})
	return append(out, frame{raw: raw, typ: "BOOKMARK", rv: s.rv, kind: kind, version: apiVersion, listed: true})
}

// resume rewrites a watch that asks for initial events into one that
// resumes from the snapshot: the server sends what changed since.
func (s *snapshot) resume(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	query := r.URL.Query()
	query.Del("sendInitialEvents")
	query.Del("resourceVersionMatch")
	query.Set("resourceVersion", s.rv)
	r.URL.RawQuery = query.Encode()
	return r
}

// caughtUp reports whether the managers listed a time traveler's
// resource again since its release: a live watch of it began after, and
// its manager took in what it listed. Under p.mu.
func (p *perturber) caughtUp(resource string) bool {
	for st := range p.streams {
		if st.resource == resource && !st.life.isDead() && st.fresh && st.synced.Load() {
			return true
		}
	}
	return false
}

// traveling returns the snapshot that answers the resource's lists, or nil.
func (p *perturber) traveling(resource string) *snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.travel != nil && p.travel.resource == resource {
		return p.travel
	}
	return nil
}
