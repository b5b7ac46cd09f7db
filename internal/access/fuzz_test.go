package access

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// FuzzBearer parses any Authorization header, and serves a request that
// carries it: a token is found only in a header "Bearer <token>" (any
// case), and comes without the spaces around it; the request is answered
// 200 only for the token the server knows, else 401 or 429.
func FuzzBearer(f *testing.F) {
	for _, h := range []string{"Bearer good", "bearer good", "BEARER  good  ", "Bearer", "Bearer ", "Basic cHJvbTpwcm9t", "Bearer a b", "Bearer\tgood", " Bearer good", "Bearer \x00", ""} {
		f.Add(h)
	}
	s := &server{users: map[string]authenticationv1.UserInfo{"good": {Username: "alice"}}, allowed: map[string]bool{"alice get /metrics": true}}
	filter := New(s.tokenReview, s.accessReview, logr.Discard())
	h := filter.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	f.Fuzz(func(t *testing.T, header string) {
		token, ok := bearer(header)
		scheme, rest, cut := strings.Cut(header, " ")
		switch {
		case ok != (cut && strings.EqualFold(scheme, "bearer") && strings.TrimSpace(rest) != ""):
			t.Fatalf("bearer(%q) = %q, %v", header, token, ok)
		case ok && (token != strings.TrimSpace(token) || token == ""):
			t.Fatalf("bearer(%q) = %q: spaces around it", header, token)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header["Authorization"] = []string{header}
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK && token != "good":
			t.Fatalf("header %q: got 200, want a refusal", header)
		case rec.Code == http.StatusOK, rec.Code == http.StatusUnauthorized, rec.Code == http.StatusTooManyRequests:
		default:
			t.Fatalf("header %q: got %d %q, want 200, 401 or 429", header, rec.Code, rec.Body)
		}
	})
}
