package crd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func definition(uid types.UID, served, established bool) *unstructured.Unstructured {
	status := "False"
	if established {
		status = "True"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "widgets.example.com", "uid": string(uid)},
		"spec":     map[string]any{"versions": []any{map[string]any{"name": "v1", "served": served}}},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": status}}},
	}}
}

// TestFollower drives Run through the life of a CRD: absent, made, served,
// no longer serving the version, replaced, removed.
func TestFollower(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(gauge)
	f := NewFollower("widgets.example.com", "v1", gauge)
	var mu sync.Mutex
	var def *unstructured.Unstructured
	var calls []string // what Run did to the cache since the last step
	acted := make(chan struct{}, 1)
	hooks := Hooks{
		Get: func() *unstructured.Unstructured {
			mu.Lock()
			defer mu.Unlock()
			return def
		},
		Serve: func(uid types.UID, deleted bool) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, fmt.Sprintf("serve %q deleted=%t", uid, deleted))
		},
		Unserved: func() {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, "unserved")
		},
		Users: func() []string { return []string{"widget-sync"} },
		Acted: func() { acted <- struct{}{} },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx, logr.Discard(), hooks)
	}()
	defer func() {
		cancel()
		<-done
	}()

	wait := func(step string) []string {
		t.Helper()
		select {
		case <-acted:
		case <-time.After(time.Minute):
			t.Fatalf("%s: Run did not act", step)
		}
		if f.Busy() {
			t.Errorf("%s: Busy after Run acted", step)
		}
		mu.Lock()
		defer mu.Unlock()
		got := calls
		calls = nil
		return got
	}
	for i, step := range []struct {
		name    string
		def     *unstructured.Unstructured
		calls   string // joined by "; "
		waiting string // in Waiting's line; "" served
	}{
		{"absent", nil, "unserved", "(not installed): widgets, for controllers \"widget-sync\""},
		{"made", definition("a", true, false), "unserved", "(" + NotEstablished + ")"},
		{"established", definition("a", true, true), `serve "a" deleted=false`, ""},
		{"version no longer served", definition("a", false, true), `serve "" deleted=false; unserved`, "(does not serve version v1)"},
		{"served again", definition("a", true, true), `serve "a" deleted=false`, ""},
		{"replaced", definition("b", true, true), `serve "" deleted=true; serve "b" deleted=false`, ""},
		{"removed", nil, `serve "" deleted=true; unserved`, "(deleted)"},
	} {
		mu.Lock()
		def = step.def
		mu.Unlock()
		if i > 0 {
			f.Kick()
		}
		if got := strings.Join(wait(step.name), "; "); got != step.calls {
			t.Errorf("%s: Run did %q, want %q", step.name, got, step.calls)
		}
		line := f.Waiting("widgets", hooks.Users)
		if step.waiting == "" && line != "" || !strings.Contains(line, step.waiting) {
			t.Errorf("%s: Waiting: got %q, want one containing %q", step.name, line, step.waiting)
		}
		if f.Served() != (step.waiting == "") {
			t.Errorf("%s: Served: got %t, want %t", step.name, f.Served(), step.waiting == "")
		}
		if mfs, err := reg.Gather(); err != nil || len(mfs) != 1 || (mfs[0].GetMetric()[0].GetGauge().GetValue() == 0) != (step.waiting == "") {
			t.Errorf("%s: gauge %v (%v), want 1 while waiting, 0 when served", step.name, mfs, err)
		}
	}
}
