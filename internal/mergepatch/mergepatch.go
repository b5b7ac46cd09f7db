// Package mergepatch makes the merge patches (RFC 7386) by which ctrl writes
// what a function changed in an object, all made by one diff
// (evanphx/json-patch, which client-go's fake applies patches with): lists
// are replaced whole. For a type whose status is a subresource, the status
// is a write of its own.
package mergepatch

import (
	"encoding/json"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Between returns old→obj's patch with old's resourceVersion, or nil.
func Between(old, obj metav1.Object) ([]byte, error) {
	diff, err := diff(old, obj)
	if err != nil || diff == nil {
		return nil, err
	}
	return WithResourceVersion(diff, old.GetResourceVersion())
}

// Status returns old→obj's patch of the status with old's
// resourceVersion, or nil.
func Status(old, obj metav1.Object) ([]byte, error) {
	_, status, err := Split(old, obj)
	if err != nil || status == nil {
		return nil, err
	}
	return WithResourceVersion(status, old.GetResourceVersion())
}

// Split returns old→obj's patches of all but the status and of the
// status, without preconditions; nil for a part that did not change.
func Split(old, obj any) (rest, status map[string]any, err error) {
	diff, err := diff(old, obj)
	if err != nil || diff == nil {
		return nil, nil, err
	}
	if s, ok := diff["status"]; ok {
		status = map[string]any{"status": s}
		delete(diff, "status")
	}
	if len(diff) > 0 {
		rest = diff
	}
	return rest, status, nil
}

// ApplyStatus decodes into out old with old→obj's status changes, as the
// API server applies a status patch; it reports whether there were any.
func ApplyStatus(old, obj, out any) (bool, error) {
	_, status, err := Split(old, obj)
	if err != nil || status == nil {
		return false, err
	}
	patch, err := json.Marshal(status)
	if err != nil {
		return false, err
	}
	doc, err := json.Marshal(old)
	if err != nil {
		return false, err
	}
	if doc, err = jsonpatch.MergePatch(doc, patch); err != nil {
		return false, err
	}
	return true, json.Unmarshal(doc, out)
}

// diff returns the decoded merge patch from old to obj, or nil.
func diff(old, obj any) (map[string]any, error) {
	before, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return nil, err
	}
	var diff map[string]any
	if err := json.Unmarshal(patch, &diff); err != nil || len(diff) == 0 {
		return nil, err
	}
	return diff, nil
}

// WithResourceVersion adds a resourceVersion precondition to a merge patch.
func WithResourceVersion(diff map[string]any, rv string) ([]byte, error) {
	meta, _ := diff["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		diff["metadata"] = meta
	}
	meta["resourceVersion"] = rv
	return json.Marshal(diff)
}
