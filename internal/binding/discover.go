package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/builtin"
)

// What a registration may leave unsaid. A custom resource's scope and
// status subresource are in its CustomResourceDefinition, which the API
// server's discovery serves: a binding to a real server learns them there,
// once per group and version, and a declared value the server contradicts
// is an error. Fakes have no discovery: there the defaults hold, a
// namespaced resource, with a status subresource if the Go type has a
// status field.

// withDefaults fills in what info leaves unsaid with the defaults for
// fakes, keeping the flags that say it was unsaid.
func (i Info) withDefaults() Info {
	if i.ScopeUnknown {
		i.Namespaced = true
	}
	if i.StatusUnknown {
		i.Status = hasStatusField(i.Type)
	}
	return i
}

// hasStatusField reports whether objects of t have a status: a field
// with the JSON name "status", or any field for unstructured objects.
func hasStatusField(t reflect.Type) bool {
	switch t {
	case unstructuredType:
		return true
	case metadataType, nil:
		return false
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return false
	}
	for f := range t.Elem().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "status" || name == "" && f.Name == "Status" {
			return true
		}
	}
	return false
}

// fromBuiltin fills in what info leaves unsaid from the table of built-in
// resources, which is what the server would say, and checks what it says.
func (i Info) fromBuiltin(r builtin.Resource) (Info, error) {
	return i.settle(r.Namespaced, r.Status, r.Kind, "the built-in resource")
}

// Discover returns the resources the server serves in a group and version
// (its discovery document, /apis/<group>/<version>): an answer it
// remembers, unless fresh is set.
type Discover func(gv schema.GroupVersion, fresh bool) ([]metav1.APIResource, error)

// NewDiscover returns a Discover that asks the server at cfg and remembers
// its answers, not its errors.
func NewDiscover(cfg *rest.Config, hc *http.Client) Discover {
	var mu sync.Mutex
	known := map[schema.GroupVersion][]metav1.APIResource{}
	return func(gv schema.GroupVersion, fresh bool) ([]metav1.APIResource, error) {
		mu.Lock()
		defer mu.Unlock()
		if list, ok := known[gv]; ok && !fresh {
			return list, nil
		}
		list, err := discover(cfg, hc, gv)
		if err == nil {
			known[gv] = list
		}
		return list, err
	}
}

// discoverTimeout bounds a discovery request, which a wiring call waits
// for.
const discoverTimeout = 30 * time.Second

func discover(cfg *rest.Config, hc *http.Client, gv schema.GroupVersion) ([]metav1.APIResource, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = &schema.GroupVersion{}, "/"
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	c.AcceptContentTypes, c.ContentType = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	rc, err := rest.UnversionedRESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, err
	}
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	ctx, cancel := context.WithTimeout(context.Background(), discoverTimeout)
	defer cancel()
	data, err := rc.Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return list.APIResources, nil
}

// ErrNotServed says that the server's discovery does not list a resource:
// its CustomResourceDefinition is not installed, or not yet.
var ErrNotServed = errors.New("the API server does not serve the resource (is its CustomResourceDefinition installed?)")

// ErrOffline says that a manager wired without an API server (for
// manifests) cannot learn what a registration left unsaid.
var ErrOffline = errors.New("there is no API server to ask: the manager is wired offline")

// Offline is the transport of a manager wired offline: every request fails
// with ErrOffline.
type Offline struct{}

// RoundTrip fails with ErrOffline.
func (Offline) RoundTrip(*http.Request) (*http.Response, error) { return nil, ErrOffline }

// learn fills in what info leaves unsaid from the server's discovery, and
// checks what it declares against it.
func (i Info) learn(d Discover) (Info, error) {
	// A remembered answer may predate the resource's CRD: ask again once.
	for _, fresh := range []bool{false, true} {
		list, err := d(i.GVR.GroupVersion(), fresh)
		if apierrors.IsNotFound(err) {
			list, err = nil, nil // the server serves nothing of the group and version
		}
		if errors.Is(err, ErrOffline) {
			return i, fmt.Errorf("%s: its scope and status subresource are unknown, and %w: "+
				"register it with its CRD (APIResource.CRD), or declare APIResource.Namespaced or ClusterScoped", i, ErrOffline)
		}
		if err != nil {
			return i, fmt.Errorf("%s: learning its scope and subresources from the API server's discovery (is its CustomResourceDefinition installed?): %w", i, err)
		}
		status := false
		var found *metav1.APIResource
		for k := range list {
			switch list[k].Name {
			case i.GVR.Resource:
				found = &list[k]
			case i.GVR.Resource + "/status":
				status = true
			}
		}
		if found != nil {
			return i.settle(found.Namespaced, status, found.Kind, "the API server's")
		}
	}
	return i, fmt.Errorf("%s: %w", i, ErrNotServed)
}

// settle fills in what info leaves unsaid with what the server says, and
// returns an error naming the field if a declared value disagrees.
func (i Info) settle(namespaced, status bool, kind, whose string) (Info, error) {
	r := i.GVR.GroupResource().String()
	scope := map[bool]string{true: "namespaced", false: "cluster-scoped"}
	switch {
	case !i.ScopeUnknown && i.Namespaced != namespaced:
		field := "APIResource.Namespaced"
		if !i.Namespaced {
			field = "APIResource.ClusterScoped"
		}
		return i, fmt.Errorf("%s: %s is set, but %s %s is %s", i, field, whose, r, scope[namespaced])
	case !i.StatusUnknown && i.Status && !status:
		return i, fmt.Errorf("%s: APIResource.Status is set, but %s %s has no status subresource", i, whose, r)
	case kind != "" && i.Kind != kind && i.Type != metadataType && i.Type != unstructuredType:
		return i, fmt.Errorf("%s: its kind is %q (APIResource.Kind, or the Go type's name), but %s %s is of kind %q: set APIResource.Kind", i, i.Kind, whose, r, kind)
	}
	i.Namespaced, i.Status = namespaced, status
	i.ScopeUnknown, i.StatusUnknown = false, false
	return i, nil
}

// resolved returns info for a backend: learned from the server when d is
// set and the resource is not built in, else completed with the defaults.
func resolved(info Info, d Discover) (Info, error) {
	if r, ok := builtin.LookupGVR(info.GVR); ok && info.Type == unstructuredType || ok && info.Type == metadataType {
		return info.fromBuiltin(r)
	}
	if info.Builtin || !info.ScopeUnknown && !info.StatusUnknown {
		return info, nil
	}
	if d == nil {
		return info.withDefaults(), nil
	}
	return info.learn(d)
}
