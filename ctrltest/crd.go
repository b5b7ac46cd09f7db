package ctrltest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{
	Group:    "apiextensions.k8s.io",
	Version:  "v1",
	Resource: "customresourcedefinitions",
}

// InstallCRDs creates the CustomResourceDefinitions of manifests, or
// updates those that exist, and blocks until each is Established and its
// served versions are in discovery. Manifests are YAML or JSON, with
// several documents or of kind List. It also waits out the 2 seconds after a
// CRD becomes Established during which the API server holds back creates of
// its resources, so that a test's first create does not stall.
func (e *Env) InstallCRDs(manifests ...[]byte) error {
	crds, err := parseCRDs(manifests)
	if err != nil {
		return err
	}
	return e.installCRDs(crds)
}

func (e *Env) installCRDs(crds []*unstructured.Unstructured) error {
	if len(crds) == 0 {
		return nil
	}
	httpClient, closeIdle, err := e.httpClient()
	if err != nil {
		return err
	}
	defer closeIdle()
	cfg := e.Config()
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	client := dyn.Resource(crdGVR)

	for _, crd := range crds {
		if err := apply(ctx, client, crd); err != nil {
			return fmt.Errorf("ctrltest: installing CRD %s: %w", crd.GetName(), err)
		}
	}
	var established time.Time
	for _, crd := range crds {
		at, err := waitEstablished(ctx, client, crd.GetName())
		if err != nil {
			return fmt.Errorf("ctrltest: CRD %s: %w", crd.GetName(), err)
		}
		if at.After(established) {
			established = at
		}
		if err := waitServed(ctx, disc, crd); err != nil {
			return fmt.Errorf("ctrltest: CRD %s: %w", crd.GetName(), err)
		}
	}
	// The apiserver delays a create of a custom resource by 2s when its CRD
	// became Established less than 2s ago (a guard for HA servers). Waiting
	// that out here keeps the delay out of the tests' first requests, where
	// it would look like a stall. The condition time has whole seconds.
	if wait := time.Until(established.Add(justCreatedWindow)); wait > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ctrltest: waiting for new CRDs to settle: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
	return nil
}

// justCreatedWindow is how long after a CRD's Established transition the
// apiserver delays creates of its resources, plus a margin.
const justCreatedWindow = 2*time.Second + 100*time.Millisecond

func apply(ctx context.Context, client dynamic.NamespaceableResourceInterface, crd *unstructured.Unstructured) error {
	_, err := client.Create(ctx, crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	for {
		existing, err := client.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		update := crd.DeepCopy()
		update.SetResourceVersion(existing.GetResourceVersion())
		_, err = client.Update(ctx, update, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// waitEstablished waits for the CRD's Established condition and returns
// the time of its transition.
func waitEstablished(ctx context.Context, client dynamic.NamespaceableResourceInterface, name string) (time.Time, error) {
	var at time.Time
	err := poll(ctx, "Established", func() (bool, error) {
		crd, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conditions {
			c, _ := c.(map[string]any)
			switch c["type"] {
			case "Established":
				if c["status"] == "True" {
					s, _ := c["lastTransitionTime"].(string)
					at, _ = time.Parse(time.RFC3339, s)
					return true, nil
				}
			case "NamesAccepted":
				if c["status"] == "False" {
					return false, fmt.Errorf("names not accepted: %v", c["message"])
				}
			}
		}
		return false, nil
	})
	return at, err
}

func waitServed(ctx context.Context, disc discovery.DiscoveryInterface, crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		v, _ := v.(map[string]any)
		name, _ := v["name"].(string)
		if served, _ := v["served"].(bool); !served || name == "" {
			continue
		}
		gv := schema.GroupVersion{Group: group, Version: name}.String()
		err := poll(ctx, "served as "+plural+"."+gv, func() (bool, error) {
			list, err := disc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil
			}
			return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool {
				return r.Name == plural
			}), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// poll calls cond every 50ms until it reports done, fails, or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// parseCRDs decodes CustomResourceDefinitions from YAML or JSON manifests.
func parseCRDs(manifests [][]byte) ([]*unstructured.Unstructured, error) {
	var crds []*unstructured.Unstructured
	for i, manifest := range manifests {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
		for doc := 0; ; doc++ {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("ctrltest: CRD manifest %d, document %d: %w", i, doc, err)
			}
			if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
				continue
			}
			objs, err := decodeObjects(raw)
			if err != nil {
				return nil, fmt.Errorf("ctrltest: CRD manifest %d, document %d: %w", i, doc, err)
			}
			for _, obj := range objs {
				if gvk := obj.GroupVersionKind(); gvk != crdGVR.GroupVersion().WithKind("CustomResourceDefinition") {
					return nil, fmt.Errorf("ctrltest: CRD manifest %d, document %d: %s %q is not an apiextensions.k8s.io/v1 CustomResourceDefinition",
						i, doc, gvk, obj.GetName())
				}
				if obj.GetName() == "" {
					return nil, fmt.Errorf("ctrltest: CRD manifest %d, document %d: CustomResourceDefinition without a name", i, doc)
				}
				crds = append(crds, obj)
			}
		}
	}
	return crds, nil
}

func decodeObjects(raw []byte) ([]*unstructured.Unstructured, error) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, raw)
	if err != nil {
		return nil, err
	}
	switch obj := obj.(type) {
	case *unstructured.Unstructured:
		return []*unstructured.Unstructured{obj}, nil
	case *unstructured.UnstructuredList:
		objs := make([]*unstructured.Unstructured, len(obj.Items))
		for i := range obj.Items {
			objs[i] = &obj.Items[i]
		}
		return objs, nil
	default:
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
}
