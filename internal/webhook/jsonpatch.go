package webhook

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Operation is one operation of an RFC 6902 JSON patch.
type Operation struct {
	Op    string // "add", "remove" or "replace"
	Path  string // an RFC 6901 JSON pointer
	Value any    // the new value, a decoded JSON document; unused by "remove"
}

// MarshalJSON writes the operation, with "value" for every operation but
// remove, even when the value is null.
func (o Operation) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// Diff returns the operations that turn the JSON document a into b. Both
// are decoded documents (map[string]any, []any, string, json.Number or
// float64, bool, nil). Objects are compared member by member, recursively;
// an array or scalar that differs is replaced whole. Members come in sorted
// order, so equal inputs give equal patches.
func Diff(a, b any) []Operation {
	return diff(nil, "", a, b)
}

func diff(ops []Operation, path string, a, b any) []Operation {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			ops = append(ops, Operation{Op: "replace", Path: path, Value: b})
		}
		return ops
	}
	for _, k := range slices.Sorted(maps.Keys(am)) {
		if _, ok := bm[k]; !ok {
			ops = append(ops, Operation{Op: "remove", Path: path + "/" + escape(k)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(bm)) {
		p := path + "/" + escape(k)
		if av, ok := am[k]; ok {
			ops = diff(ops, p, av, bm[k])
		} else {
			ops = append(ops, Operation{Op: "add", Path: p, Value: bm[k]})
		}
	}
	return ops
}

// escape escapes a member name for a JSON pointer (RFC 6901): "~" becomes
// "~0" and "/" becomes "~1", in that order.
func escape(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// Patch returns the JSON patch, for the object raw that the API server
// sent, of the changes a defaulting function made: before and after are
// the object as Go marshals it before and after the call. It is not
// Diff(raw, after): the round trip through a Go type drops the members the
// type does not know and writes zero values the request left out, and the
// patch must not remove the first nor add the second. So the changes from
// before to after are carried over onto raw (merge), and the patch is the
// difference between raw and that. It returns nil if nothing changed.
func Patch(raw, before, after []byte) ([]byte, error) {
	var r, b, a any
	for _, d := range []struct {
		data []byte
		v    *any
	}{{raw, &r}, {before, &b}, {after, &a}} {
		dec := json.NewDecoder(bytes.NewReader(d.data))
		dec.UseNumber() // keep integers beyond 2^53 exact
		if err := dec.Decode(d.v); err != nil {
			return nil, err
		}
	}
	ops := Diff(r, merge(r, b, a))
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// merge returns raw with the changes from before to after applied. A member
// that after added or changed is set; one that after removed is removed; a
// member of raw that before lacks (unknown to the Go type) stays; a member
// that raw lacks and the change left as it was in before (a zero value the
// round trip wrote) stays absent. raw is not modified.
func merge(raw, before, after any) any {
	if reflect.DeepEqual(before, after) {
		return raw
	}
	rm, rok := raw.(map[string]any)
	bm, bok := before.(map[string]any)
	am, aok := after.(map[string]any)
	if !rok || !bok || !aok {
		return after
	}
	out := maps.Clone(rm)
	for k := range bm {
		if _, ok := am[k]; !ok {
			delete(out, k)
		}
	}
	for k, av := range am {
		bv, inBefore := bm[k]
		rv, inRaw := rm[k]
		switch {
		case !inBefore && !inRaw:
			out[k] = av
		case !inBefore:
			// omitempty dropped it, or the type does not know it: merge
			// as if it had been empty, keeping raw's members.
			out[k] = merge(rv, map[string]any{}, av)
		case !inRaw:
			if !reflect.DeepEqual(bv, av) {
				out[k] = av
			}
		default:
			out[k] = merge(rv, bv, av)
		}
	}
	return out
}
