package ctrl

import (
	"encoding/json"
	"reflect"
)

// mergePatch returns the JSON merge patch (RFC 7386) that turns old into
// obj, carrying old's resourceVersion as a precondition, or nil if nothing
// changed. Objects are compared field by field; a removed field is set to
// null; any other value, lists included, is replaced whole.
func mergePatch[T Object](old, obj T) ([]byte, error) {
	rest, status, err := splitPatches(old, obj)
	if err != nil || rest == nil && status == nil {
		return nil, err
	}
	if rest == nil {
		rest = status
	} else if status != nil {
		rest["status"] = status["status"]
	}
	return withResourceVersion(rest, old.GetResourceVersion())
}

// statusPatch is mergePatch of the status alone.
func statusPatch[T Object](old, obj T) ([]byte, error) {
	_, status, err := splitPatches(old, obj)
	if err != nil || status == nil {
		return nil, err
	}
	return withResourceVersion(status, old.GetResourceVersion())
}

// splitPatches returns the merge patch from old to obj without the
// status, and the merge patch of the status alone, without preconditions:
// for a type whose status is a subresource they are two writes. Either is
// nil when its part did not change.
func splitPatches[T Object](old, obj T) (rest, status map[string]any, err error) {
	before, err := toJSONMap(old)
	if err != nil {
		return nil, nil, err
	}
	after, err := toJSONMap(obj)
	if err != nil {
		return nil, nil, err
	}
	bs, _ := before["status"].(map[string]any)
	as, _ := after["status"].(map[string]any)
	delete(before, "status")
	delete(after, "status")
	if rest = mergeDiff(before, after); len(rest) == 0 {
		rest = nil
	}
	if status = mergeDiff(map[string]any{"status": bs}, map[string]any{"status": as}); len(status) == 0 {
		status = nil
	}
	return rest, status, nil
}

// withResourceVersion encodes a merge patch with a resourceVersion
// precondition.
func withResourceVersion(diff map[string]any, rv string) ([]byte, error) {
	meta, _ := diff["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		diff["metadata"] = meta
	}
	meta["resourceVersion"] = rv
	return json.Marshal(diff)
}

func toJSONMap(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

// mergeDiff returns the merge patch from a to b.
func mergeDiff(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			out[k] = nil
			continue
		}
		am, aIsMap := av.(map[string]any)
		bm, bIsMap := bv.(map[string]any)
		if aIsMap && bIsMap {
			if d := mergeDiff(am, bm); len(d) > 0 {
				out[k] = d
			}
			continue
		}
		if !reflect.DeepEqual(av, bv) {
			out[k] = bv
		}
	}
	for k, bv := range b {
		if _, ok := a[k]; !ok {
			out[k] = bv
		}
	}
	return out
}
