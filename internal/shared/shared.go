// Package shared checks that code handed an object it shares with others,
// such as a reconcile handed the cache's object, leaves it as it was: a
// Sampler picks the uses to check, Diff names the first field changed.
package shared

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// InTest reports whether the program is a test binary, which registers
// testing's flags before any test runs (but after package initialization):
// it does not link package testing into every program, as testing.Testing
// would. Tests of behaviour outside test binaries replace it.
var InTest = func() bool { return flag.Lookup("test.v") != nil }

// Sampler picks which uses to check: each of the first First, then one in
// Every (1 or less: each). It is safe for concurrent use.
type Sampler struct {
	First, Every uint64
	n            atomic.Uint64
}

// Next reports whether the next use is checked.
func (s *Sampler) Next() bool {
	n := s.n.Add(1)
	return n <= s.First || s.Every <= 1 || n%s.Every == 0
}

// Diff returns the JSON path of a field where a and b, values of one type,
// differ ("metadata.labels", "spec.containers[0].image", "data[\"k\"]"),
// or "" if they are equal. Quantities and times compare by value, as the
// API server compares them: a Quantity that cached its string is unchanged.
func Diff[T any](a, b T) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() {
		return "(type)"
	}
	rev, diff := walk(va, vb)
	if !diff {
		return ""
	}
	if len(rev) == 0 {
		return "(object)"
	}
	slices.Reverse(rev)
	return strings.TrimPrefix(strings.Join(rev, ""), ".")
}

var (
	quantityType = reflect.TypeFor[resource.Quantity]()
	unstructType = reflect.TypeFor[unstructured.Unstructured]()
	timeType     = reflect.TypeFor[metav1.Time]()
	microType    = reflect.TypeFor[metav1.MicroTime]()
)

// walk reports whether a and b differ and, if so, the path to a difference,
// innermost first: it allocates only once it found one.
func walk(a, b reflect.Value) ([]string, bool) {
	if a.CanInterface() && b.CanInterface() {
		switch a.Type() {
		case quantityType:
			qa, qb := a.Interface().(resource.Quantity), b.Interface().(resource.Quantity)
			return nil, qa.Cmp(qb) != 0 || qa.Format != qb.Format
		case timeType:
			return nil, !a.Interface().(metav1.Time).Time.Equal(b.Interface().(metav1.Time).Time)
		case microType:
			return nil, !a.Interface().(metav1.MicroTime).Time.Equal(b.Interface().(metav1.MicroTime).Time)
		}
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return nil, a.IsNil() != b.IsNil()
		}
		if a.Kind() == reflect.Pointer && a.Pointer() == b.Pointer() {
			return nil, false
		}
		if a.Kind() == reflect.Interface && a.Elem().Type() != b.Elem().Type() {
			return nil, true
		}
		return walk(a.Elem(), b.Elem())
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			if p, d := walk(a.Field(i), b.Field(i)); d {
				if name := jsonName(t.Field(i)); name != "" && t != unstructType {
					p = append(p, name)
				}
				return p, true
			}
		}
		return nil, false
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return nil, true
		}
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return nil, false
		}
		fallthrough
	case reflect.Array:
		for i := range a.Len() {
			if p, d := walk(a.Index(i), b.Index(i)); d {
				return append(p, "["+strconv.Itoa(i)+"]"), true
			}
		}
		return nil, false
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return nil, true
		}
		if a.Pointer() == b.Pointer() {
			return nil, false
		}
		for it := a.MapRange(); it.Next(); {
			vb := b.MapIndex(it.Key())
			if !vb.IsValid() {
				return []string{mapKey(a, it.Key())}, true
			}
			if p, d := walk(it.Value(), vb); d {
				return append(p, mapKey(a, it.Key())), true
			}
		}
		for it := b.MapRange(); a.Len() != b.Len() && it.Next(); {
			if !a.MapIndex(it.Key()).IsValid() {
				return []string{mapKey(b, it.Key())}, true
			}
		}
		return nil, false
	case reflect.String:
		return nil, a.String() != b.String()
	case reflect.Bool:
		return nil, a.Bool() != b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return nil, a.Int() != b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return nil, a.Uint() != b.Uint()
	case reflect.Float32, reflect.Float64:
		return nil, a.Float() != b.Float()
	case reflect.Complex64, reflect.Complex128:
		return nil, a.Complex() != b.Complex()
	default: // channels, functions: by identity
		return nil, a.Pointer() != b.Pointer()
	}
}

// mapKey is k's part of a path in m: ".k" in a JSON object (an
// Unstructured's), else "[\"k\"]".
func mapKey(m, k reflect.Value) string {
	if m.Type().Elem().Kind() == reflect.Interface && k.Kind() == reflect.String {
		return "." + k.String()
	}
	return "[" + strconv.Quote(fmt.Sprint(k)) + "]"
}

// jsonName is the field's part of a path: "." and its name in JSON, or
// nothing for an embedded struct without a name, whose fields JSON inlines
// (TypeMeta).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case name == "-" || name == "" && !f.Anonymous:
		return "." + f.Name
	case name == "":
		return ""
	}
	return "." + name
}
