package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/typedctrl/ctrl/internal/webhook"
)

// decode decodes a JSON document as the package does, numbers kept exact.
func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return v
}

// apply applies the JSON patch to doc with evanphx/json-patch, the library
// the API server applies admission patches with.
func apply(t *testing.T, doc string, patch []byte) string {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", patch, err)
	}
	out, err := p.Apply([]byte(doc))
	if err != nil {
		t.Fatalf("applying %s to %s: %v", patch, doc, err)
	}
	return string(out)
}

// sameJSON fails the test unless the two documents are equal as JSON.
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	if !reflect.DeepEqual(decode(t, got), decode(t, want)) {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want string // the patch
	}{
		{"equal", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, `null`},
		{"scalar in a nested object", `{"spec":{"x":{"y":1}}}`, `{"spec":{"x":{"y":2}}}`,
			`[{"op":"replace","path":"/spec/x/y","value":2}]`},
		{"members added and removed, in key order", `{"a":1,"c":3}`, `{"b":2,"d":{"e":null}}`,
			`[{"op":"remove","path":"/a"},{"op":"remove","path":"/c"},{"op":"add","path":"/b","value":2},{"op":"add","path":"/d","value":{"e":null}}]`},
		{"null is a value", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null}]`},
		{"escaping", `{"metadata":{"annotations":{}}}`,
			`{"metadata":{"annotations":{"example.com/hash":"x","a~b":"y","~1":"z","":"e"}}}`,
			`[{"op":"add","path":"/metadata/annotations/","value":"e"},` +
				`{"op":"add","path":"/metadata/annotations/a~0b","value":"y"},` +
				`{"op":"add","path":"/metadata/annotations/example.com~1hash","value":"x"},` +
				`{"op":"add","path":"/metadata/annotations/~01","value":"z"}]`},
		{"arrays are replaced whole", `{"l":[1,2,3]}`, `{"l":[1,2]}`, `[{"op":"replace","path":"/l","value":[1,2]}]`},
		{"type change", `{"a":{"b":1}}`, `{"a":"b"}`, `[{"op":"replace","path":"/a","value":"b"}]`},
		{"the root", `{"a":1}`, `[1]`, `[{"op":"replace","path":"","value":[1]}]`},
		{"exact big integers", `{"n":9007199254740993}`, `{"n":9007199254740995}`,
			`[{"op":"replace","path":"/n","value":9007199254740995}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := webhook.Diff(decode(t, tt.a), decode(t, tt.b))
			patch, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if string(patch) != tt.want {
				t.Errorf("got patch %s, want %s", patch, tt.want)
			}
			if ops != nil && tt.name != "the root" { // evanphx/json-patch does not replace the root
				sameJSON(t, apply(t, tt.a, patch), tt.b)
			}
		})
	}
}

// TestDiffApplies checks on random documents that applying Diff(a, b) to a
// gives b.
func TestDiffApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		a := randomObject(r, 3)
		b := mutate(r, a, 3)
		aj, _ := json.Marshal(a)
		bj, _ := json.Marshal(b)
		patch, err := json.Marshal(webhook.Diff(decode(t, string(aj)), decode(t, string(bj))))
		if err != nil {
			t.Fatal(err)
		}
		if string(patch) == "null" {
			sameJSON(t, string(aj), string(bj))
			continue
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { sameJSON(t, apply(t, string(aj), patch), string(bj)) })
	}
}

var keys = []string{"a", "b", "a/b", "~", "~1", "", "spec", "x.y"}

func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(6); {
	case n == 0 && depth > 0:
		return randomObject(r, depth-1)
	case n == 1:
		return []any{r.IntN(3), "s"}
	case n == 2:
		return nil
	case n == 3:
		return r.IntN(2) == 0
	case n == 4:
		return fmt.Sprint(r.IntN(3))
	default:
		return r.IntN(3)
	}
}

func randomObject(r *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for range r.IntN(5) {
		m[keys[r.IntN(len(keys))]] = randomValue(r, depth)
	}
	return m
}

// mutate returns a changed copy of m.
func mutate(r *rand.Rand, m map[string]any, depth int) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch r.IntN(4) {
		case 0: // dropped
		case 1:
			out[k] = randomValue(r, depth)
		case 2:
			if sub, ok := v.(map[string]any); ok {
				out[k] = mutate(r, sub, depth-1)
				continue
			}
			out[k] = v
		default:
			out[k] = v
		}
	}
	for range r.IntN(3) {
		out[keys[r.IntN(len(keys))]] = randomValue(r, depth)
	}
	return out
}

func TestPatch(t *testing.T) {
	tests := []struct {
		name               string
		raw, before, after string
		wantPatch, wantDoc string
	}{
		{
			name:      "unknown members stay, zero values are not added",
			raw:       `{"kind":"Widget","extra":{"k":1},"spec":{"message":""}}`,
			before:    `{"kind":"Widget","spec":{"message":"","size":0},"status":{}}`,
			after:     `{"kind":"Widget","spec":{"message":"hello","size":0},"status":{}}`,
			wantPatch: `[{"op":"replace","path":"/spec/message","value":"hello"}]`,
			wantDoc:   `{"kind":"Widget","extra":{"k":1},"spec":{"message":"hello"}}`,
		},
		{
			name:      "a member whose parent the request lacks",
			raw:       `{"kind":"Widget"}`,
			before:    `{"kind":"Widget","spec":{"message":"","size":0}}`,
			after:     `{"kind":"Widget","spec":{"message":"","size":3}}`,
			wantPatch: `[{"op":"add","path":"/spec","value":{"message":"","size":3}}]`,
			wantDoc:   `{"kind":"Widget","spec":{"message":"","size":3}}`,
		},
		{
			name:      "removals and escaped keys",
			raw:       `{"metadata":{"labels":{"a":"1","b":"2"},"annotations":{"unknown.io/x":"y"}}}`,
			before:    `{"metadata":{"labels":{"a":"1","b":"2"}}}`,
			after:     `{"metadata":{"labels":{"a":"1"},"annotations":{"example.com/defaulted":"true"}}}`,
			wantPatch: `[{"op":"add","path":"/metadata/annotations/example.com~1defaulted","value":"true"},{"op":"remove","path":"/metadata/labels/b"}]`,
			wantDoc:   `{"metadata":{"labels":{"a":"1"},"annotations":{"unknown.io/x":"y","example.com/defaulted":"true"}}}`,
		},
		{
			name:      "arrays replaced, big numbers elsewhere untouched",
			raw:       `{"n":9007199254740993,"l":[{"a":1,"unknown":2}]}`,
			before:    `{"n":9007199254740993,"l":[{"a":1}]}`,
			after:     `{"n":9007199254740993,"l":[{"a":1},{"a":2}]}`,
			wantPatch: `[{"op":"replace","path":"/l","value":[{"a":1},{"a":2}]}]`,
			wantDoc:   `{"n":9007199254740993,"l":[{"a":1},{"a":2}]}`,
		},
		{
			name:   "no change",
			raw:    `{"a":1,"unknown":2}`,
			before: `{"a":1}`, after: `{"a":1}`,
			wantPatch: ``,
			wantDoc:   `{"a":1,"unknown":2}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := webhook.Patch([]byte(tt.raw), []byte(tt.before), []byte(tt.after))
			if err != nil {
				t.Fatal(err)
			}
			if string(patch) != tt.wantPatch {
				t.Errorf("got patch %s, want %s", patch, tt.wantPatch)
			}
			if patch != nil {
				sameJSON(t, apply(t, tt.raw, patch), tt.wantDoc)
			}
		})
	}
	if _, err := webhook.Patch([]byte(`{`), []byte(`{}`), []byte(`{}`)); err == nil {
		t.Error("Patch of malformed JSON: got nil error")
	}
}
