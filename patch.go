package ctrl

import (
	"encoding/json"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// Merge patches (RFC 7386) are how ctrl writes what a function changed in
// an object, all made by one diff (evanphx/json-patch, which client-go's
// fake applies patches with): lists are replaced whole. For a type whose
// status is a subresource, the status is a write of its own.

// mergePatch returns old→obj's patch with old's resourceVersion, or nil.
func mergePatch[T Object](old, obj T) ([]byte, error) {
	diff, err := diffObjects(old, obj)
	if err != nil || diff == nil {
		return nil, err
	}
	return withResourceVersion(diff, old.GetResourceVersion())
}

func statusPatch[T Object](old, obj T) ([]byte, error) {
	_, status, err := splitPatches(old, obj)
	if err != nil || status == nil {
		return nil, err
	}
	return withResourceVersion(status, old.GetResourceVersion())
}

// splitPatches returns old→obj's patches of all but the status and of the
// status, without preconditions; nil for a part that did not change.
func splitPatches[T Object](old, obj T) (rest, status map[string]any, err error) {
	diff, err := diffObjects(old, obj)
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

// diffObjects returns the decoded merge patch from old to obj, or nil.
func diffObjects(old, obj any) (map[string]any, error) {
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

// withResourceVersion adds a resourceVersion precondition to a merge patch.
func withResourceVersion(diff map[string]any, rv string) ([]byte, error) {
	meta, _ := diff["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		diff["metadata"] = meta
	}
	meta["resourceVersion"] = rv
	return json.Marshal(diff)
}
