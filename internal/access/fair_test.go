package access

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// TestNewScraperDuringFlood: a client with no credentials sends 30 made-up
// tokens a second for a minute, from one address. A scraper elsewhere
// whose token is new at every scrape (the worst case: a restart, a
// rotation) is served each time, and the flood costs no more reviews than
// one address may spend.
func TestNewScraperDuringFlood(t *testing.T) {
	s := &server{users: map[string]authenticationv1.UserInfo{}, allowed: map[string]bool{"prometheus get /metrics": true}}
	f := New(s.tokenReview, s.accessReview, logr.Discard())
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	do := func(remote, token string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	const seconds, floodRate = 60, 30
	refused := 0
	for i := range seconds * floodRate {
		now = now.Add(time.Second / floodRate)
		// Each from a port of its own, as new connections come.
		if code := do(fmt.Sprintf("10.0.0.66:%d", 30000+i), fmt.Sprintf("made-up-%d", i)); code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
			t.Fatalf("made-up token %d: got %d, want 401 or 429", i, code)
		}
		if i%floodRate == floodRate/2 { // a scrape a second, with a token never seen
			token := fmt.Sprintf("prom-token-%d", i)
			s.mu.Lock()
			s.users[token] = authenticationv1.UserInfo{Username: "prometheus"}
			s.mu.Unlock()
			if code := do("10.0.0.7:41000", token); code != http.StatusOK {
				refused++
			}
		}
	}
	if refused > 0 {
		t.Errorf("the new scraper was refused %d of %d scrapes during the flood, want none", refused, seconds)
	}
	reviews, _ := s.counts()
	if limit := sourceBurst + sourceRate*seconds + seconds; reviews > limit {
		t.Errorf("the flood and the scrapes cost %d token reviews, want at most %d", reviews, limit)
	}
}

// TestReviewsCoalesced: 50 requests at once with one token the filter has
// no live answer for send one TokenReview, then one SubjectAccessReview
// for its user; every request gets the answer. Once the answers expire,
// the same again.
func TestReviewsCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &server{users: map[string]authenticationv1.UserInfo{"prom-token": {Username: "prometheus"}},
			allowed: map[string]bool{"prometheus get /metrics": true}}
		g := &gatedServer{server: s}
		f := New(g.tokenReview, g.accessReview, logr.Discard())
		h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
		for round := 1; round <= 2; round++ {
			tokens0, sars0 := s.counts()
			tokenGate, sarGate := g.close()
			codes := make([]int, 50)
			var wg sync.WaitGroup
			for i := range codes {
				wg.Go(func() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest("GET", "/metrics", nil)
					req.RemoteAddr = fmt.Sprintf("10.0.0.%d:1234", i)
					req.Header.Set("Authorization", "Bearer prom-token")
					h.ServeHTTP(rec, req)
					codes[i] = rec.Code
				})
			}
			synctest.Wait() // every request waits for the TokenReview
			if tokens, _ := s.counts(); tokens-tokens0 != 1 {
				t.Errorf("round %d: 50 concurrent requests with one token sent %d TokenReviews, want 1", round, tokens-tokens0)
			}
			close(tokenGate)
			synctest.Wait() // every request waits for the SubjectAccessReview
			if _, sars := s.counts(); sars-sars0 != 1 {
				t.Errorf("round %d: 50 concurrent requests of one user sent %d SubjectAccessReviews, want 1", round, sars-sars0)
			}
			close(sarGate)
			wg.Wait()
			for i, code := range codes {
				if code != http.StatusOK {
					t.Errorf("round %d, request %d: got %d, want 200", round, i, code)
				}
			}
			time.Sleep(allowedTTL) // the bubble's clock: every answer expires
		}
	})
}

// gatedServer holds each kind of review until its gate is closed, and
// counts a review when it arrives.
type gatedServer struct {
	*server
	mu                 sync.Mutex
	tokenGate, sarGate chan struct{}
}

// close sets new gates and returns them.
func (g *gatedServer) close() (token, sar chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokenGate, g.sarGate = make(chan struct{}), make(chan struct{})
	return g.tokenGate, g.sarGate
}

func (g *gatedServer) tokenReview(ctx context.Context, r *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
	out, err := g.server.tokenReview(ctx, r)
	g.mu.Lock()
	gate := g.tokenGate
	g.mu.Unlock()
	<-gate
	return out, err
}

func (g *gatedServer) accessReview(ctx context.Context, r *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	out, err := g.server.accessReview(ctx, r)
	g.mu.Lock()
	gate := g.sarGate
	g.mu.Unlock()
	<-gate
	return out, err
}

// TestLimiterBounds: each address gets sourceBurst reviews at once and
// sourceRate a second after; all of them reviewBurst and reviewRate; and
// the addresses tracked stay within maxSources, however many there are.
func TestLimiterBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	l := limiter{all: bucket{rate: reviewRate, burst: reviewBurst}, sources: map[string]*bucket{}}
	takes := func(source string, n int) int {
		got := 0
		for range n {
			if l.take(source, now) {
				got++
			}
		}
		return got
	}
	if got := takes("a", 100); got != sourceBurst {
		t.Errorf("one address at once: got %d reviews, want %d", got, sourceBurst)
	}
	if got := takes("b", 100) + takes("c", 100) + takes("d", 100) + takes("e", 100); got != reviewBurst-sourceBurst {
		t.Errorf("four more addresses at once: got %d reviews, want the rest of the burst, %d", got, reviewBurst-sourceBurst)
	}
	now = now.Add(time.Second)
	if got := takes("a", 100); got != sourceRate {
		t.Errorf("one address a second later: got %d reviews, want %d", got, sourceRate)
	}

	l = limiter{all: bucket{rate: 1e9, burst: 1e9}, sources: map[string]*bucket{}}
	for i := range 3 * maxSources {
		now = now.Add(time.Microsecond) // no bucket refills meanwhile
		if !l.take(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), now) {
			t.Fatalf("address %d: refused its first review", i)
		}
		if len(l.sources) > maxSources {
			t.Fatalf("after %d addresses: %d tracked, want at most %d", i+1, len(l.sources), maxSources)
		}
	}
}

// TestClientAddress: a client is its address without the port.
func TestClientAddress(t *testing.T) {
	for remote, want := range map[string]string{
		"10.0.0.1:43210":        "10.0.0.1",
		"[fd00::1]:43210":       "fd00::1",
		"[fd00::1%eth0]:443":    "fd00::1%eth0",
		"pipe":                  "pipe",
		"":                      "",
		"10.0.0.1":              "10.0.0.1",
		"[fd00::1]":             "[fd00::1]",
		"10.0.0.1:43210:extra":  "10.0.0.1:43210:extra",
		"host.example.com:8443": "host.example.com",
	} {
		if got := clientAddress(remote); got != want {
			t.Errorf("clientAddress(%q) = %q, want %q", remote, got, want)
		}
	}
}
