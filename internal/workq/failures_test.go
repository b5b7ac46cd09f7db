package workq

import (
	"cmp"
	"errors"
	"testing"
)

func TestFailures(t *testing.T) {
	var f Failures[string]
	if got := f.Sorted(cmp.Compare[string]); got != nil {
		t.Fatalf("empty: %v", got)
	}
	boom := errors.New("boom")
	f.Failed("b", boom)
	f.Failed("a", boom)
	f.Failed("b", errors.New("again"))
	got := f.Sorted(cmp.Compare[string])
	if len(got) != 2 || got[0].Key != "a" || got[0].Attempts != 1 || got[1].Key != "b" || got[1].Attempts != 2 || got[1].Err.Error() != "again" {
		t.Fatalf("after three failures: %+v, want a once, then b twice with its last error", got)
	}
	f.Done("a")
	f.Forget(func(k string) bool { return k == "c" })
	if got := f.Sorted(cmp.Compare[string]); len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("after a is done: %+v, want b alone", got)
	}
	f.Forget(func(k string) bool { return k == "b" })
	if got := f.Sorted(cmp.Compare[string]); got != nil {
		t.Fatalf("after b is forgotten: %+v, want none", got)
	}
}
