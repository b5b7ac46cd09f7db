package ctrltest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// objectKey names an object of a run, its namespace the run's.
type objectKey struct {
	gvr        schema.GroupVersionResource
	name       string
	namespaced bool
}

func (k objectKey) String() string {
	if k.gvr.Group == "" {
		return k.gvr.Resource + "/" + k.name
	}
	return k.gvr.Resource + "." + k.gvr.Group + "/" + k.name
}

func dedupe(keys []objectKey) []objectKey {
	var out []objectKey
	for _, k := range keys {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b objectKey) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// capture reads the objects at the end of a run, each flattened to its
// fields ("spec.replicas" → "2", JSON), normalized to compare across runs;
// an object that does not exist is absent.
func capture(ctx context.Context, cfg *rest.Config, ns string, keys []objectKey) (map[string]map[string]string, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	state := map[string]map[string]string{}
	var mapper meta.RESTMapper
	for _, k := range keys {
		ri := dc.Resource(k.gvr)
		var get dynamic.ResourceInterface = ri
		if k.namespaced {
			get = ri.Namespace(ns)
		}
		u, err := get.Get(ctx, k.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ctrltest: reading %s at the end of the run: %w", k, err)
		}
		if refs := u.GetOwnerReferences(); len(refs) > 0 {
			if mapper == nil {
				disc, err := discovery.NewDiscoveryClientForConfig(cfg)
				if err != nil {
					return nil, err
				}
				mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
			}
			orphan, err := orphaned(ctx, dc, mapper, u.GetNamespace(), refs)
			if err != nil {
				return nil, fmt.Errorf("ctrltest: reading the owners of %s at the end of the run: %w", k, err)
			}
			if orphan {
				continue // the garbage collector, which the test's control plane lacks, deletes it
			}
		}
		state[k.String()] = flatten(normalize(u.Object, ns))
	}
	return state, nil
}

// orphaned reports whether none of the owners refs name exists, so that a
// cluster's garbage collector deletes their dependent (in namespace ns):
// a run that made a child for a parent deleted meanwhile (a controller
// served an older view, say) ends as the reference did, once collected.
func orphaned(ctx context.Context, dc dynamic.Interface, mapper meta.RESTMapper, ns string, refs []metav1.OwnerReference) (bool, error) {
	for _, ref := range refs {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return false, nil // not the collector's to judge
		}
		m, err := mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
		if err != nil {
			return false, nil
		}
		var get dynamic.ResourceInterface = dc.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			get = dc.Resource(m.Resource).Namespace(ns)
		}
		owner, err := get.Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err
		case owner.GetUID() == ref.UID:
			return false, nil
		}
	}
	return true, nil
}

// normalize removes what the server sets and masks what differs between
// runs by construction: the namespace, times, uids.
func normalize(obj map[string]any, ns string) map[string]any {
	if md, ok := obj["metadata"].(map[string]any); ok {
		for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "namespace", "selfLink"} {
			delete(md, f)
		}
		if refs, ok := md["ownerReferences"].([]any); ok {
			for _, r := range refs {
				if m, ok := r.(map[string]any); ok {
					delete(m, "uid")
				}
			}
		}
	}
	return mask(obj, ns).(map[string]any)
}

var (
	uidPattern  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timePattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)
)

func mask(v any, ns string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = mask(x, ns)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = mask(x, ns)
		}
		return v
	case string:
		if timePattern.MatchString(v) {
			return "<time>"
		}
		v = uidPattern.ReplaceAllString(v, "<uid>")
		if ns != "" {
			v = strings.ReplaceAll(v, ns, "<namespace>")
		}
		return v
	}
	return v
}

// flatten maps each leaf's dotted path to its JSON.
func flatten(obj map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				out[path] = "{}"
			}
			for k, x := range v {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, x)
			}
		case []any:
			if len(v) == 0 {
				out[path] = "[]"
			}
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		default:
			b, _ := json.Marshal(v)
			out[path] = string(b)
		}
	}
	walk("", obj)
	return out
}

// stateDiff is one difference between two end states: an object one has
// and the other lacks (field ""), or a field.
type stateDiff struct {
	object, field string
	ref, got      string // "" if absent
}

func (d stateDiff) String() string {
	show := func(s string) string {
		if s == "" {
			return "(absent)"
		}
		if len(s) > 120 {
			return s[:120] + "..."
		}
		return s
	}
	if d.field == "" {
		if d.ref == "" {
			return d.object + ": exists here, not in the reference"
		}
		return d.object + ": exists in the reference, not here"
	}
	return fmt.Sprintf("%s: %s: reference %s, here %s", d.object, d.field, show(d.ref), show(d.got))
}

// diffStates lists how got differs from ref, on fields only if given
// (each a path or the prefix of paths).
func diffStates(ref, got map[string]map[string]string, fields []string) []stateDiff {
	keep := func(path string) bool {
		if len(fields) == 0 {
			return true
		}
		for _, f := range fields {
			if path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[") {
				return true
			}
		}
		return false
	}
	var out []stateDiff
	objs := map[string]bool{}
	for o := range ref {
		objs[o] = true
	}
	for o := range got {
		objs[o] = true
	}
	for _, o := range slices.Sorted(maps.Keys(objs)) {
		r, inRef := ref[o]
		g, inGot := got[o]
		switch {
		case !inRef:
			out = append(out, stateDiff{object: o, got: "x"})
			continue
		case !inGot:
			out = append(out, stateDiff{object: o, ref: "x"})
			continue
		}
		paths := map[string]bool{}
		for p := range r {
			paths[p] = true
		}
		for p := range g {
			paths[p] = true
		}
		for _, p := range slices.Sorted(maps.Keys(paths)) {
			if keep(p) && r[p] != g[p] {
				out = append(out, stateDiff{object: o, field: p, ref: r[p], got: g[p]})
			}
		}
	}
	return out
}
