package access

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// server is a pretend API server: tokens name users, and rules say which
// user may use which verb on which path.
type server struct {
	mu       sync.Mutex
	users    map[string]authenticationv1.UserInfo // by token
	allowed  map[string]bool                      // "user verb path"
	fail     error
	tokenReq int
	sarReq   int
	lastSAR  authorizationv1.SubjectAccessReviewSpec
}

func (s *server) tokenReview(_ context.Context, r *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenReq++
	if s.fail != nil {
		return nil, s.fail
	}
	out := r.DeepCopy()
	if u, ok := s.users[r.Spec.Token]; ok {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
	}
	return out, nil
}

func (s *server) accessReview(_ context.Context, r *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sarReq++
	if s.fail != nil {
		return nil, s.fail
	}
	s.lastSAR = r.Spec
	out := r.DeepCopy()
	a := r.Spec.NonResourceAttributes
	out.Status.Allowed = a != nil && s.allowed[r.Spec.User+" "+a.Verb+" "+a.Path]
	return out, nil
}

func (s *server) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReq, s.sarReq
}

func TestFilter(t *testing.T) {
	s := &server{
		users: map[string]authenticationv1.UserInfo{
			"prom-token":  {Username: "system:serviceaccount:monitoring:prometheus", UID: "1", Groups: []string{"system:serviceaccounts"}, Extra: map[string]authenticationv1.ExtraValue{"a": {"b"}}},
			"other-token": {Username: "alice"},
		},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus get /metrics": true},
	}
	f := New(s.tokenReview, s.accessReview, logr.Discard())
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	do := func(method, path, auth string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}

	for _, tt := range []struct {
		name, method, path, auth string
		code                     int
		body                     string
	}{
		{"no token", "GET", "/metrics", "", 401, "Unauthorized: send a bearer token"},
		{"another scheme", "GET", "/metrics", "Basic cHJvbTpwcm9t", 401, "Unauthorized: send a bearer token"},
		{"an unknown token", "GET", "/metrics", "Bearer made-up", 401, "Unauthorized"},
		{"allowed", "GET", "/metrics", "Bearer prom-token", 200, "metrics"},
		{"the scheme in lower case", "GET", "/metrics", "bearer prom-token", 200, "metrics"},
		{"another verb", "POST", "/metrics", "Bearer prom-token", 403, `Forbidden: user "system:serviceaccount:monitoring:prometheus" may not post /metrics`},
		{"another path", "GET", "/debug", "Bearer prom-token", 403, `Forbidden: user "system:serviceaccount:monitoring:prometheus" may not get /debug`},
		{"a user without the right", "GET", "/metrics", "Bearer other-token", 403, `Forbidden: user "alice" may not get /metrics`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := do(tt.method, tt.path, tt.auth); code != tt.code || body != tt.body {
				t.Errorf("got %d %q, want %d %q", code, body, tt.code, tt.body)
			}
		})
	}
	// The review carries the whole user, and the path and verb.
	do("GET", "/other", "Bearer prom-token")
	spec := s.lastSAR
	if spec.User != "system:serviceaccount:monitoring:prometheus" || spec.UID != "1" || len(spec.Groups) != 1 || spec.Extra["a"][0] != "b" ||
		spec.NonResourceAttributes.Path != "/other" || spec.NonResourceAttributes.Verb != "get" || spec.ResourceAttributes != nil {
		t.Errorf("got review %+v, want the user, path and verb", spec)
	}

	// Answers are cached: the same requests ask nothing more.
	tokens, sars := s.counts()
	for range 3 {
		do("GET", "/metrics", "Bearer prom-token")
		do("GET", "/metrics", "Bearer other-token")
		do("GET", "/metrics", "Bearer made-up")
	}
	if t2, s2 := s.counts(); t2 != tokens || s2 != sars {
		t.Errorf("repeated requests made %d token and %d access reviews, want none", t2-tokens, s2-sars)
	}
	// A denial is remembered 30 s, an allowance 5 minutes, a token a minute.
	s.mu.Lock()
	s.allowed["alice get /metrics"] = true
	delete(s.allowed, "system:serviceaccount:monitoring:prometheus get /metrics")
	s.mu.Unlock()
	now = now.Add(31 * time.Second)
	if code, _ := do("GET", "/metrics", "Bearer other-token"); code != 200 {
		t.Errorf("alice after her denial expired: got %d, want 200", code)
	}
	if code, _ := do("GET", "/metrics", "Bearer prom-token"); code != 200 {
		t.Errorf("prometheus within its allowance: got %d, want 200", code)
	}
	now = now.Add(5 * time.Minute)
	if code, _ := do("GET", "/metrics", "Bearer prom-token"); code != 403 {
		t.Errorf("prometheus after its allowance expired: got %d, want 403", code)
	}
	tokens, _ = s.counts()
	s.mu.Lock()
	s.users["made-up"] = authenticationv1.UserInfo{Username: "alice"}
	s.mu.Unlock()
	if code, _ := do("GET", "/metrics", "Bearer made-up"); code != 200 {
		t.Errorf("a token reviewed again after a minute: got %d, want 200", code)
	}
	if t2, _ := s.counts(); t2 != tokens+1 {
		t.Errorf("got %d token reviews, want one", t2-tokens)
	}

	// Errors fail the request and are not cached.
	s.mu.Lock()
	s.fail = errors.New("connection refused")
	s.mu.Unlock()
	if code, body := do("GET", "/metrics", "Bearer new-token"); code != 500 || body != "Authentication failed" {
		t.Errorf("with the server down: got %d %q, want 500", code, body)
	}
	s.mu.Lock()
	s.fail = nil
	s.users["new-token"] = authenticationv1.UserInfo{Username: "alice"}
	s.mu.Unlock()
	if code, _ := do("GET", "/metrics", "Bearer new-token"); code != 200 {
		t.Errorf("with the server back: got %d, want 200", code)
	}
}

// TestCacheBound checks that made-up tokens, reviewed as fast as the
// filter allows, each from a client address of its own, grow neither the
// cache nor the addresses tracked past their bounds, and do not push out
// the answer of a token that authenticates.
func TestCacheBound(t *testing.T) {
	s := &server{users: map[string]authenticationv1.UserInfo{"good": {Username: "alice"}}, allowed: map[string]bool{"alice get /metrics": true}}
	f := New(s.tokenReview, s.accessReview, logr.Discard())
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	h := f.Wrap(http.NotFoundHandler())
	client := 0
	do := func(token string) int {
		client++
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.RemoteAddr = fmt.Sprintf("10.0.%d.%d:40000", client/256, client%256)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	do("good")
	for i := range maxEntries + 10 {
		now = now.Add(time.Second / reviewRate) // a review for each
		if code := do(strings.Repeat("x", i+1)); code != http.StatusUnauthorized {
			t.Fatalf("made-up token %d: got %d, want 401", i, code)
		}
	}
	f.mu.Lock()
	n, sources := len(f.tokens.bad), len(f.reviews.sources)
	f.mu.Unlock()
	if n > maxEntries {
		t.Errorf("got %d cached tokens, want at most %d", n, maxEntries)
	}
	if sources > maxSources {
		t.Errorf("got %d client addresses tracked, want at most %d", sources, maxSources)
	}
	reviews, _ := s.counts()
	now = time.Unix(1000, 0).Add(authenticatedTTL - time.Second) // the good answer is still live
	if code := do("good"); code != http.StatusNotFound {
		t.Errorf("the good token after the flood: got %d, want 404 from the handler", code)
	}
	if after, _ := s.counts(); after != reviews {
		t.Errorf("the good token after the flood cost %d reviews, want none", after-reviews)
	}
}
