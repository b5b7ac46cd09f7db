package access

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// TestTokenFlood sends 10,000 made-up tokens, 1,000 a second, between the
// scrapes of a valid scraper: its scrapes cost no review after its first,
// and the flood costs the API server a bounded number of reviews a second.
func TestTokenFlood(t *testing.T) {
	s := &server{
		users:   map[string]authenticationv1.UserInfo{"prom-token": {Username: "prometheus"}},
		allowed: map[string]bool{"prometheus get /metrics": true},
	}
	f := New(s.tokenReview, s.accessReview, logr.Discard())
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	do := func(token string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("prom-token"); rec.Code != 200 {
		t.Fatalf("the scraper's first request: got %d %q, want 200", rec.Code, rec.Body)
	}

	const perSecond = 50 // what the flood may cost the API server
	flood := func(from, n int, scrape bool) {
		t.Helper()
		second, _ := s.counts()
		for i := from; i < from+n; i++ {
			if i%1000 == 0 { // a second passes
				if reviews, _ := s.counts(); reviews-second > perSecond {
					t.Fatalf("the flood cost %d token reviews in a second, want at most %d", reviews-second, perSecond)
				}
				second, _ = s.counts()
				now = now.Add(time.Second)
			}
			switch rec := do(fmt.Sprintf("made-up-%d", i)); rec.Code {
			case http.StatusUnauthorized:
			case http.StatusTooManyRequests:
				if rec.Header().Get("Retry-After") == "" {
					t.Fatalf("a refused made-up token: got 429 without Retry-After")
				}
			default:
				t.Fatalf("made-up token %d: got %d %q, want 401 or 429", i, rec.Code, rec.Body)
			}
			if scrape && i%100 == 0 {
				before, _ := s.counts()
				if rec := do("prom-token"); rec.Code != 200 {
					t.Fatalf("the scraper during the flood: got %d %q, want 200", rec.Code, rec.Body)
				}
				if after, _ := s.counts(); after != before {
					t.Fatalf("the scraper's request during the flood cost %d token reviews, want none", after-before)
				}
			}
		}
	}
	start, _ := s.counts()
	flood(0, 10000, true)
	if reviews, _ := s.counts(); reviews-start > perSecond*10 {
		t.Errorf("10,000 made-up tokens over 10 s cost %d token reviews, want at most %d", reviews-start, perSecond*10)
	}

	// Once its answer expires, the scraper's token is reviewed again, flood
	// or not: it authenticated before.
	now = now.Add(authenticatedTTL)
	flood(10000, 100, false) // uses up what the flood may cost
	before, _ := s.counts()
	if rec := do("made-up-again"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a new token with the reviews used up: got %d, want 429", rec.Code)
	}
	if rec := do("prom-token"); rec.Code != 200 {
		t.Fatalf("the scraper after its answer expired, in the flood: got %d %q, want 200", rec.Code, rec.Body)
	}
	if after, _ := s.counts(); after != before+1 {
		t.Errorf("the scraper after its answer expired cost %d token reviews, want one", after-before)
	}
}
