package ctrl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl/internal/leader"
)

// TestFence checks the last check of a write's leadership, in the
// transport: a write whose context carries an ended term never reaches the
// server, whatever client sends it; reads do, and so do writes under a
// running term or none.
func TestFence(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	_, hc, _, err := restClients(&rest.Config{Host: srv.URL}, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	ended := leader.WithTerm(context.Background(), leader.Ended("ns/l", fmt.Errorf("%w: for the test", ErrLeadershipLost)))
	tests := []struct {
		name    string
		ctx     context.Context
		method  string
		refused bool
	}{
		{"write, ended term", ended, http.MethodPatch, true},
		{"delete, ended term", ended, http.MethodDelete, true},
		{"read, ended term", ended, http.MethodGet, false},
		{"write, no term", context.Background(), http.MethodPost, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := requests.Load()
			req, err := http.NewRequestWithContext(tt.ctx, tt.method, srv.URL+"/api/v1/namespaces/ns/configmaps/a", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			reached := requests.Load() != before
			if tt.refused {
				if !errors.Is(err, ErrLeadershipLost) || reached {
					t.Errorf("got error %v and reached the server: %t, want ErrLeadershipLost and not reached", err, reached)
				}
				return
			}
			if err != nil || !reached {
				t.Errorf("got error %v and reached the server: %t, want no error and reached", err, reached)
			}
		})
	}
}
