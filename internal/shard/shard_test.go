package shard

import (
	"fmt"
	"testing"
)

func TestOwnerSpreadsAndMovesLittle(t *testing.T) {
	three := []string{"a", "b", "c"}
	counts := map[string]int{}
	for i := range 3000 {
		counts[Owner(fmt.Sprint(i), three)]++
	}
	// Names that differ in one character, and keys alike but for a number.
	similar := map[string]int{}
	for i := range 3000 {
		similar[Owner(fmt.Sprintf("ns-abcde/cm-%04d", i), []string{"r1", "r2", "r3"})]++
	}
	for _, m := range []string{"r1", "r2", "r3"} {
		if similar[m] < 850 || similar[m] > 1150 {
			t.Errorf("member %s owns %d of 3000 similar keys, want about 1000: %v", m, similar[m], similar)
		}
	}
	for _, m := range three {
		if counts[m] < 850 || counts[m] > 1150 {
			t.Errorf("member %s owns %d of 3000 keys, want about 1000: %v", m, counts[m], counts)
		}
	}
	// c leaves: only c's keys move.
	moved := 0
	for i := range 3000 {
		k := fmt.Sprint(i)
		before, after := Owner(k, three), Owner(k, []string{"a", "b"})
		if before != after {
			moved++
			if before != "c" {
				t.Fatalf("key %s moved from %s to %s when c left", k, before, after)
			}
		}
	}
	if moved != counts["c"] {
		t.Errorf("%d keys moved when c left, want c's %d", moved, counts["c"])
	}
	if Owner("x", nil) != "" {
		t.Error("an owner without members")
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		cur      string
		draining bool
		want     string
		curLive  bool
		step     Step
	}{
		{"", false, "a", false, Assign},
		{"a", false, "a", true, Keep},
		{"a", true, "a", true, Undrain},
		{"b", false, "a", true, Drain},
		{"b", true, "a", true, Wait},
		{"b", false, "a", false, Assign}, // b is dead
		{"b", true, "a", false, Assign},
		{"b", false, "", false, Keep}, // no member alive
	}
	for _, tt := range tests {
		if got := Decide(tt.cur, tt.draining, tt.want, tt.curLive); got != tt.step {
			t.Errorf("Decide(%q, %t, %q, %t) = %d, want %d", tt.cur, tt.draining, tt.want, tt.curLive, got, tt.step)
		}
	}
}
