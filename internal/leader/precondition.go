package leader

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Precondition returns patch data that makes resourceVersion rv a
// precondition of the patch: the API server refuses it (see Refused) if the
// object is at another version. A write made under a term carries one, so
// that a write that leaves after the term ended (the holder was paused
// between its last check and the wire) is refused by the server itself
// once another holder wrote. A merge or strategic merge patch sets
// metadata.resourceVersion; a JSON patch begins with a test of it. It
// reports false, and returns data, for other patch types and for a patch
// that names the resourceVersion itself or is not what its type says.
func Precondition(pt types.PatchType, data []byte, rv string) ([]byte, bool) {
	if rv == "" {
		return data, false
	}
	switch pt {
	case types.MergePatchType, types.StrategicMergePatchType:
		return mergePrecondition(data, rv)
	case types.JSONPatchType:
		var ops []struct {
			Path string `json:"path"`
			From string `json:"from"`
		}
		if json.Unmarshal(data, &ops) != nil || ops == nil {
			return data, false
		}
		for _, op := range ops {
			if op.Path == rvPath || op.From == rvPath {
				return data, false
			}
		}
		test, _ := json.Marshal(map[string]string{"op": "test", "path": rvPath, "value": rv})
		rest := bytes.TrimSpace(data)[1:] // after the [
		sep := []byte(",")
		if len(ops) == 0 {
			sep = nil
		}
		return slices.Concat([]byte("["), test, sep, rest), true
	}
	return data, false
}

const rvPath = "/metadata/resourceVersion"

// Refused reports whether err may be the API server's refusal of a patch
// or delete for the precondition that Precondition (or a delete's
// Preconditions) set: a conflict that is not server-side apply's conflict
// of field managers, or, for a JSON patch, any refusal of the patch (the
// server does not say which test failed). It was the precondition's only if
// the object is now at another version than the one the write carried.
func Refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	switch s.Code {
	case http.StatusConflict:
		if s.Details != nil {
			for _, c := range s.Details.Causes {
				if c.Type == metav1.CauseTypeFieldManagerConflict {
					return false
				}
			}
		}
		return true
	case http.StatusUnprocessableEntity:
		return true
	}
	return false
}

func mergePrecondition(data []byte, rv string) ([]byte, bool) {
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
