package synced

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/binding"
)

type cache struct {
	name      string
	synced    chan struct{}
	forbidden bool
	last      error
}

func (c *cache) String() string          { return c.name }
func (c *cache) Synced() <-chan struct{} { return c.synced }
func (c *cache) Forbidden() bool         { return c.forbidden }
func (c *cache) LastError() error        { return c.last }

func TestWait(t *testing.T) {
	synced := func(name string) *cache {
		c := &cache{name: name, synced: make(chan struct{})}
		close(c.synced)
		return c
	}
	waiting := func(name string, last error) *cache {
		return &cache{name: name, synced: make(chan struct{}), last: last}
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
	errNoList := fmt.Errorf("widgets: %w", binding.ErrNoListKind)
	errRefused := errors.New("connection refused")
	forbidden := waiting("cache of secrets", errors.New("forbidden"))
	forbidden.forbidden = true
	for _, tc := range []struct {
		name   string
		caches []*cache
		cancel bool   // ctx is done from the start
		want   string // in the error; "" nil
		wantIs error  // wrapped by the error
	}{
		{name: "all synced", caches: []*cache{synced("cache of pods"), synced("cache of widgets")}},
		{name: "forbidden: not waited for", caches: []*cache{synced("cache of pods"), forbidden}},
		{name: "not served", caches: []*cache{synced("cache of pods"), waiting("cache of widgets", notFound)},
			want: "cache of widgets is not served by the API server (is its CustomResourceDefinition installed?)", wantIs: notFound},
		{name: "cannot be listed", caches: []*cache{waiting("cache of widgets", errNoList)},
			want: "cache of widgets cannot be listed", wantIs: binding.ErrNoListKind},
		{name: "unsynced past the timeout", caches: []*cache{waiting("cache of widgets", errRefused)},
			want: "cache of widgets did not sync within 300ms: connection refused", wantIs: errRefused},
		{name: "ctx done", caches: []*cache{waiting("cache of widgets", nil)}, cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			caches := make([]Cache, len(tc.caches))
			for i, c := range tc.caches {
				caches[i] = c
			}
			timeout := 300 * time.Millisecond
			if tc.want == "" && !tc.cancel {
				timeout = time.Minute // what is waited for must end it first
			}
			err := Wait(ctx, timeout, caches)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			case tc.wantIs != nil && !errors.Is(err, tc.wantIs):
				t.Fatalf("got %v, want one wrapping %v", err, tc.wantIs)
			}
		})
	}
}
