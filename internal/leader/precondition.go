package leader

import (
	"bytes"
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"
)

// Precondition returns a merge or strategic merge patch that also sets
// metadata.resourceVersion to rv, which the API server takes as a
// precondition: it refuses the patch with a conflict if the object is at
// another version. A write made under a term carries one, so that a write
// that leaves after the term ended (the holder was paused between its last
// check and the wire) is refused by the server itself once another holder
// wrote. It reports false, and returns data, for other patch types and for
// a patch that sets a resourceVersion of its own or is no JSON object.
func Precondition(pt types.PatchType, data []byte, rv string) ([]byte, bool) {
	if rv == "" || pt != types.MergePatchType && pt != types.StrategicMergePatchType {
		return data, false
	}
	var patch map[string]json.RawMessage
	if json.Unmarshal(data, &patch) != nil || patch == nil {
		return data, false
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := patch["metadata"]; ok {
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, &meta) != nil {
			return data, false
		}
		if _, ok := meta["resourceVersion"]; ok {
			return data, false
		}
	}
	v, _ := json.Marshal(rv)
	meta["resourceVersion"] = v
	m, err := json.Marshal(meta)
	if err != nil {
		return data, false
	}
	patch["metadata"] = m
	out, err := json.Marshal(patch)
	if err != nil {
		return data, false
	}
	return out, true
}
