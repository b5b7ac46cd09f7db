package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	_, hc, _, err := New(&rest.Config{Host: srv.URL}, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	ended := leader.WithTerm(context.Background(), leader.Ended("ns/l", fmt.Errorf("%w: for the test", leader.ErrLost)))
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
				if !errors.Is(err, leader.ErrLost) || reached {
					t.Errorf("got error %v and reached the server: %t, want leader.ErrLost and not reached", err, reached)
				}
				return
			}
			if err != nil || !reached {
				t.Errorf("got error %v and reached the server: %t, want no error and reached", err, reached)
			}
		})
	}
}

// TestFenceBody checks the fence that the transport's reads of a write's
// body pass: a term that ends while the request is on its way (its headers
// sent, its body not) cuts the request short, and the server, which reads
// the whole body before acting, never acts on it.
func TestFenceBody(t *testing.T) {
	var acted, cut atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			cut.Add(1)
			return
		}
		acted.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	_, hc, _, err := New(&rest.Config{Host: srv.URL}, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	term, end := leader.Manual("ns/l")
	ctx := leader.WithTerm(context.Background(), term)
	// The first read of the body ends the term, as a pause past the
	// deadline between the request's start and the rest of its body does.
	body := &endingReader{data: []byte(`{"data":{"a":"b"}}`), end: func() { end(fmt.Errorf("%w: for the test", leader.ErrLost)) }}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL+"/api/v1/namespaces/ns/configmaps/a", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	if !errors.Is(err, leader.ErrLost) {
		t.Errorf("got error %v, want leader.ErrLost", err)
	}
	if acted.Load() != 0 {
		t.Errorf("the server acted on %d writes, want none", acted.Load())
	}
}

// endingReader hands out one byte per read and calls end after the first.
type endingReader struct {
	data []byte
	end  func()
	n    int
}

func (r *endingReader) Read(p []byte) (int, error) {
	if r.n == len(r.data) {
		return 0, io.EOF
	}
	if r.n == 1 {
		r.end()
	}
	p[0] = r.data[r.n]
	r.n++
	return 1, nil
}
