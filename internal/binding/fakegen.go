package binding

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedctrl/ctrl/internal/builtin"
)

// Generation in fakes. Client-go's fakes never set metadata.generation,
// so a GenerationChanged filter would drop every update in a unit test.
// The reactors of LikeServer keep it as the API server does: a write
// cannot set it; a create sets it to 1; an update or patch of the object
// (not of its status subresource) adds one when anything but metadata, and
// status for a type with a status subresource, changed. That is the custom
// resource strategy (apiextensions-apiserver's customresource.PrepareForUpdate),
// and the built-in strategies that keep a generation compare their spec,
// which is the same thing. Built-in types whose strategy keeps none
// (ConfigMaps, Secrets, Services, ...) have none on the fakes either.
// Server-side apply is left to the fake, and objects a fake is seeded with
// keep the generation they were given.

// generationRule says how the API server keeps the generation of a
// resource.
type generationRule struct {
	keeps    bool // set to 1 on create; no: as the create says
	status   bool // a status subresource: its changes do not count
	bumps    bool // changes count; no: created at 1, never changed
	alsoMeta string
	// unknown: not built in, not registered: a status subresource if the
	// object has a status field, as the fakes assume for registered types.
	unknown bool
}

// builtinGenerations are the built-in resources whose strategy keeps a
// generation (k8s.io/kubernetes/pkg/registry/*/*/strategy.go, v1.37:
// PrepareForCreate sets Generation = 1).
var builtinGenerations = map[schema.GroupResource]generationRule{
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}:         {bumps: true},
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}:   {bumps: true},
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:     {bumps: true},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       {bumps: true},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: {bumps: true},
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}:   {bumps: true},
	{Group: "apps", Resource: "daemonsets"}:                                                {bumps: true},
	// Annotations count: a Deployment copies them to its ReplicaSets.
	{Group: "apps", Resource: "deployments"}:                                         {bumps: true, alsoMeta: "annotations"},
	{Group: "apps", Resource: "replicasets"}:                                         {bumps: true},
	{Group: "apps", Resource: "statefulsets"}:                                        {bumps: true},
	{Group: "batch", Resource: "cronjobs"}:                                           {bumps: true},
	{Group: "batch", Resource: "jobs"}:                                               {bumps: true},
	{Resource: "pods"}:                                                               {bumps: true},
	{Resource: "podtemplates"}:                                                       {bumps: true},
	{Resource: "replicationcontrollers"}:                                             {bumps: true},
	{Group: "discovery.k8s.io", Resource: "endpointslices"}:                          {bumps: true, alsoMeta: "labels"},
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                 {bumps: true},
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}: {bumps: true},
	{Group: "lifecycle.k8s.io", Resource: "evictions"}:                               {bumps: true},
	{Group: "lifecycle.k8s.io", Resource: "evictionrequests"}:                        {bumps: true},
	{Group: "networking.k8s.io", Resource: "ingresses"}:                              {bumps: true},
	{Group: "networking.k8s.io", Resource: "ingressclasses"}:                         {bumps: true},
	{Group: "networking.k8s.io", Resource: "networkpolicies"}:                        {bumps: true},
	{Group: "policy", Resource: "poddisruptionbudgets"}:                              {bumps: true},
	{Group: "resource.k8s.io", Resource: "deviceclasses"}:                            {bumps: true},
	{Group: "resource.k8s.io", Resource: "devicetaintrules"}:                         {bumps: true},
	{Group: "resource.k8s.io", Resource: "resourceslices"}:                           {bumps: true},
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:                        {},
}

// generationRuleOf returns the rule of a resource served by a fake.
func generationRuleOf(gvr schema.GroupVersionResource) generationRule {
	if r, ok := builtin.LookupGVR(gvr); ok {
		rule, keeps := builtinGenerations[gvr.GroupResource()]
		rule.keeps, rule.status = keeps, r.Status
		return rule
	}
	for _, info := range Registered() {
		if info.GVR == gvr {
			return generationRule{keeps: true, bumps: true, status: info.Status}
		}
	}
	return generationRule{keeps: true, bumps: true, unknown: true}
}

// generations is an object tracker that keeps the generation of the
// objects one write stores. ObjectReaction performs the write through it.
type generations struct {
	clienttesting.ObjectTracker
	rule        generationRule
	subresource string
}

// withGenerations returns the tracker through which the write a keeps
// generations.
func withGenerations(tracker clienttesting.ObjectTracker, a clienttesting.Action) clienttesting.ObjectTracker {
	return generations{ObjectTracker: tracker, rule: generationRuleOf(a.GetResource()), subresource: a.GetSubresource()}
}

func (g generations) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	// A type that keeps none keeps what the create said.
	if m, err := meta.Accessor(obj); err == nil && g.rule.keeps && m.GetGeneration() != 1 {
		obj = obj.DeepCopyObject() // the caller's object stays as it was
		m, _ = meta.Accessor(obj)
		m.SetGeneration(1)
	}
	return g.ObjectTracker.Create(gvr, obj, ns, opts...)
}

func (g generations) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	return g.ObjectTracker.Update(gvr, g.next(gvr, obj, ns, true), ns, opts...)
}

func (g generations) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	// obj is ObjectReaction's own, the patched copy it answers with.
	return g.ObjectTracker.Patch(gvr, g.next(gvr, obj, ns, false), ns, opts...)
}

// next returns obj (a copy, if asked to copy) with the generation the API
// server would store: the old one, plus one for a change that counts.
func (g generations) next(gvr schema.GroupVersionResource, obj runtime.Object, ns string, copy bool) runtime.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj
	}
	old, err := g.ObjectTracker.Get(gvr, ns, m.GetName())
	if err != nil {
		return obj // the tracker answers
	}
	oldMeta, err := meta.Accessor(old)
	if err != nil {
		return obj
	}
	want := oldMeta.GetGeneration()
	if g.rule.bumps && g.subresource == "" && g.changed(old, obj) {
		want++
	}
	if m.GetGeneration() != want {
		if copy {
			obj = obj.DeepCopyObject() // the caller's object stays as it was
			m, _ = meta.Accessor(obj)
		}
		m.SetGeneration(want)
	}
	return obj
}

// changed reports whether obj differs from old in what counts for the
// generation.
func (g generations) changed(old, obj runtime.Object) bool {
	a, b := content(old), content(obj)
	if a == nil || b == nil {
		return false
	}
	status := g.rule.status
	if g.rule.unknown {
		_, hasA := a["status"]
		_, hasB := b["status"]
		status = hasA || hasB
	}
	if g.rule.alsoMeta != "" {
		if !equality.Semantic.DeepEqual(metaField(a, g.rule.alsoMeta), metaField(b, g.rule.alsoMeta)) {
			return true
		}
	}
	for _, m := range []map[string]any{a, b} {
		delete(m, "metadata")
		delete(m, "apiVersion")
		delete(m, "kind")
		if status {
			delete(m, "status")
		}
	}
	return !equality.Semantic.DeepEqual(a, b)
}

// content returns a shallow copy of the fields of obj, or nil.
func content(obj runtime.Object) map[string]any {
	var m map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m = u.Object
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return nil
		}
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func metaField(m map[string]any, field string) any {
	md, _ := m["metadata"].(map[string]any)
	v, ok := md[field].(map[string]any)
	if !ok || len(v) == 0 {
		return nil
	}
	return v
}
