package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	base := config{duration: 90 * time.Second, kills: 4, pauses: 2, down: 5 * time.Second, pauseFor: 15 * time.Second, compaction: 5 * time.Second}
	tests := []struct {
		name    string
		change  func(*config)
		want    []faultKind
		wantErr bool
	}{
		{name: "defaults", change: func(*config) {}, want: []faultKind{kill, pause, kill, kill, pauseKill}},
		{name: "smoke", change: func(c *config) { c.duration, c.kills, c.pauses = 30*time.Second, 1, 1 }, want: []faultKind{pauseKill}},
		{name: "kills only", change: func(c *config) { c.pauses = 0 }, want: []faultKind{kill, kill, kill, kill}},
		{name: "pauses only", change: func(c *config) { c.kills = 0 }, want: []faultKind{pause, pause}},
		{name: "none", change: func(c *config) { c.kills, c.pauses = 0, 0 }},
		{name: "too short", change: func(c *config) { c.duration = 40 * time.Second }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.change(&c)
			faults, err := plan(c)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got plan %v, want an error", faults)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []faultKind
			for _, f := range faults {
				kinds = append(kinds, f.kind)
			}
			if !slices.Equal(kinds, tt.want) {
				t.Fatalf("got faults %v, want %v", kinds, tt.want)
			}
			if len(faults) == 0 {
				return
			}
			if faults[0].at != lead {
				t.Errorf("got first fault at %s, want %s", faults[0].at, lead)
			}
			for i := 1; i < len(faults); i++ {
				if prev := faults[i-1]; faults[i].at < prev.at+c.length(prev.kind) {
					t.Errorf("fault %d at %s starts before fault %d is expected to end", i, faults[i].at, i-1)
				}
			}
			last := faults[len(faults)-1]
			if end := last.at + c.length(last.kind); end > c.duration-tail+time.Millisecond {
				t.Errorf("got the last fault ending at %s, want by %s", end, c.duration-tail)
			}
		})
	}
}

func TestReadLog(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want logStats
	}{
		{
			name: "klog",
			log: `I1130 05:13:35.358870    3050 reflector.go:472] "Listing and watching" type="*v1.ConfigMap"
I1130 05:15:05.434501    3050 reflector.go:651] "Watch closed" type="*v1.ConfigMap" err="The resourceVersion for the provided watch is too old."
I1130 05:15:54.793582    3050 reflector.go:472] "Listing and watching" type="*v1.ConfigMap"
`,
			want: logStats{gone: 1, relists: 1, relistDelay: 49.359081},
		},
		{
			name: "logr",
			log: `05:09:53.400 "level"=4 "msg"="Listing and watching" "cache"="*v1.ConfigMap"
05:11:22.373 "level"=5 "msg"="Watch closed" "err"="The resourceVersion for the provided watch is too old."
05:11:22.473 "level"=4 "msg"="Listing and watching" "cache"="*v1.ConfigMap"
`,
			want: logStats{gone: 1, relists: 1, relistDelay: 0.1},
		},
		{
			name: "no relist after the last 410",
			log: `05:09:53.400 "msg"="Listing and watching"
05:11:22.373 "msg"="Watch closed" "err"="too old"
05:11:22.473 "msg"="Listing and watching"
05:12:22.373 "msg"="Watch closed" "err"="too old"
`,
			want: logStats{gone: 2, relists: 1, relistDelay: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(path, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			got := readLog(path)
			if got.gone != tt.want.gone || got.relists != tt.want.relists || math.Abs(got.relistDelay-tt.want.relistDelay) > 1e-6 {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
