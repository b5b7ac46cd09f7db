package leader

import (
	"context"
	"testing"
)

func TestStatus(t *testing.T) {
	var s Status
	leading, changed := s.Leading()
	if leading {
		t.Fatal("the zero Status leads")
	}
	ctx := context.Background()
	s.Begin(ctx)
	select {
	case <-changed:
		t.Fatal("Begin told the observers")
	default:
	}
	s.Set(ctx)
	select {
	case <-changed:
	default:
		t.Fatal("Set did not close the channel")
	}
	if leading, _ := s.Leading(); !leading {
		t.Fatal("not leading under a context without a term")
	}
	s.Set(nil)
	if leading, _ := s.Leading(); leading || s.Lost() {
		t.Fatalf("after a clean stop: leading %v, lost %v; want neither", leading, s.Lost())
	}
}
