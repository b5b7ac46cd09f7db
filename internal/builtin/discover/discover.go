// Package discover walks kubernetes.Interface with reflection to find every
// resource the typed clientset serves. It is used by the generator of the
// builtin table and by the test that proves the table complete; the library
// itself never imports it, so the fake clientset stays out of user binaries.
package discover

import (
	"context"
	"fmt"
	"reflect"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Resource is one resource of the typed clientset, keyed by its Go type.
type Resource struct {
	Type       string // Go type: import path + "." + name
	Group      string
	Version    string
	Resource   string
	Kind       string
	Namespaced bool
	Watch      bool // the typed client can list and watch it
	Status     bool // the typed client has UpdateStatus
}

// Resources returns every resource of kubernetes.Interface, sorted by Type.
func Resources() ([]Resource, error) {
	cs := fake.NewClientset()
	iface := reflect.TypeFor[kubernetes.Interface]()
	v := reflect.ValueOf(cs)
	var out []Resource
	seen := map[string]Resource{}
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		if m.Type.NumIn() != 0 || m.Type.NumOut() != 1 || m.Name == "Discovery" {
			continue
		}
		group := v.MethodByName(m.Name).Call(nil)[0]
		gt := m.Type.Out(0)
		for j := range gt.NumMethod() {
			rm := gt.Method(j)
			if rm.Name == "RESTClient" {
				continue
			}
			r, ok, err := probe(cs, group.MethodByName(rm.Name), rm.Type)
			if err != nil {
				return nil, fmt.Errorf("%s().%s: %w", m.Name, rm.Name, err)
			}
			if !ok {
				continue
			}
			if prev, dup := seen[r.Type]; dup && prev != r {
				return nil, fmt.Errorf("%s is served twice: %+v and %+v", r.Type, prev, r)
			}
			if _, dup := seen[r.Type]; !dup {
				seen[r.Type] = r
				out = append(out, r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// probe calls one resource accessor (ConfigMaps(ns), Nodes()) and one verb on
// the result, and reads the resource from the action the fake recorded.
func probe(cs *fake.Clientset, accessor reflect.Value, t reflect.Type) (Resource, bool, error) {
	var args []reflect.Value
	switch {
	case t.NumIn() == 0:
	case t.NumIn() == 1 && t.In(0).Kind() == reflect.String:
		args = []reflect.Value{reflect.ValueOf("ns")}
	default:
		return Resource{}, false, nil
	}
	if t.NumOut() != 1 || t.Out(0).Kind() != reflect.Interface {
		return Resource{}, false, nil
	}
	client := accessor.Call(args)[0]
	ct := t.Out(0)
	r := Resource{Namespaced: len(args) == 1}
	_, r.Watch = ct.MethodByName("Watch")
	_, r.Status = ct.MethodByName("UpdateStatus")

	// The Go type is what Get or Create returns.
	verb, ok := ct.MethodByName("Get")
	if !ok {
		if verb, ok = ct.MethodByName("Create"); !ok {
			return Resource{}, false, nil
		}
	}
	obj := verb.Type.Out(0)
	if obj.Kind() != reflect.Pointer || obj.Elem().Kind() != reflect.Struct {
		return Resource{}, false, fmt.Errorf("%s returns %s", verb.Name, obj)
	}
	r.Type = obj.Elem().PkgPath() + "." + obj.Elem().Name()
	r.Kind = obj.Elem().Name()

	cs.ClearActions()
	ctx := reflect.ValueOf(context.Background())
	m := client.MethodByName(verb.Name)
	if verb.Name == "Get" {
		m.Call([]reflect.Value{ctx, reflect.ValueOf("x"), reflect.ValueOf(metav1.GetOptions{})})
	} else {
		m.Call([]reflect.Value{ctx, reflect.New(obj.Elem()), reflect.ValueOf(metav1.CreateOptions{})})
	}
	actions := cs.Actions()
	if len(actions) != 1 {
		return Resource{}, false, fmt.Errorf("%s recorded %d actions", verb.Name, len(actions))
	}
	gvr := actions[0].GetResource()
	if actions[0].GetSubresource() != "" {
		return Resource{}, false, fmt.Errorf("%s went to subresource %q", verb.Name, actions[0].GetSubresource())
	}
	if a, ok := actions[0].(clienttesting.GenericAction); ok && a.GetNamespace() != "" != r.Namespaced {
		return Resource{}, false, fmt.Errorf("namespace mismatch for %s", r.Type)
	}
	r.Group, r.Version, r.Resource = gvr.Group, gvr.Version, gvr.Resource
	return r, true, nil
}
