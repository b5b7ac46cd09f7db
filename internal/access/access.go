// Package access lets the API server decide who may reach the manager's
// HTTPS endpoints, as kube-rbac-proxy and controller-runtime's
// metrics/filters do, without their dependency on k8s.io/apiserver: a
// request's bearer token is checked with a TokenReview, and its user's
// right to the request's path and verb with a SubjectAccessReview for a
// non-resource URL (RBAC's nonResourceURLs, such as "/metrics" with
// verb "get").
//
// Answers are cached, so that a scraper costs the API server two requests
// a few times an hour, not two per scrape: a token's review for a minute,
// an allowed access for five, a denied one for 30 seconds (the durations of
// controller-runtime's filter). Errors are not cached: the request fails
// with 500 and the next one asks again.
package access

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// The lifetimes of cached answers.
const (
	authenticatedTTL = time.Minute
	allowedTTL       = 5 * time.Minute
	deniedTTL        = 30 * time.Second
	// reviewTimeout bounds each review, as controller-runtime's filter does.
	reviewTimeout = 10 * time.Second
	// maxEntries bounds each cache: tokens and users are few, but a client
	// sending made-up tokens must not grow it without end.
	maxEntries = 4096
)

// Filter authenticates and authorizes requests through the API server
// before passing them on. Create it with [New]. It is safe for concurrent
// use.
type Filter struct {
	tokenReview  func(context.Context, *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error)
	accessReview func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)
	log          logr.Logger
	now          func() time.Time

	mu     sync.Mutex
	tokens map[[sha256.Size]byte]entry[*authenticationv1.UserInfo] // nil user: not authenticated
	access map[string]entry[bool]
}

type entry[V any] struct {
	value   V
	expires time.Time
}

// New returns a filter that asks the API server through tokenReview and
// accessReview, which create the review they are given and return the
// server's answer, and logs refusals and errors to log.
func New(tokenReview func(context.Context, *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error),
	accessReview func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error),
	log logr.Logger) *Filter {
	return &Filter{
		tokenReview: tokenReview, accessReview: accessReview, log: log, now: time.Now,
		tokens: map[[sha256.Size]byte]entry[*authenticationv1.UserInfo]{},
		access: map[string]entry[bool]{},
	}
}

// Wrap returns a handler that serves a request with h only if its bearer
// token authenticates (else 401) and its user may use the request's verb
// (its method in lower case: "get" for GET) on its path (else 403).
func (f *Filter) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			http.Error(w, "Unauthorized: send a bearer token", http.StatusUnauthorized)
			return
		}
		user, err := f.authenticate(r.Context(), token)
		if err != nil {
			f.log.Error(err, "authenticating a request", "path", r.URL.Path)
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			f.log.V(1).Info("refused a request: its token does not authenticate", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(r.Method)
		allowed, err := f.authorize(r.Context(), user, verb, r.URL.Path)
		if err != nil {
			f.log.Error(err, "authorizing a request", "user", user.Username, "verb", verb, "path", r.URL.Path)
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			msg := fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, verb, r.URL.Path)
			f.log.V(1).Info("refused a request", "user", user.Username, "verb", verb, "path", r.URL.Path)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearer returns the token of an Authorization header "Bearer <token>";
// the scheme's case does not matter (RFC 7235).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}

// authenticate returns the user of token, or nil if the API server does not
// recognize it. Only a digest of the token is kept.
func (f *Filter) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if user, ok := lookup(f, f.tokens, key); ok {
		return user, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := f.tokenReview(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	store(f, f.tokens, key, user, authenticatedTTL)
	return user, nil
}

// authorize reports whether user may use verb on path.
func (f *Filter) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	key := accessKey(user, verb, path)
	if allowed, ok := lookup(f, f.access, key); ok {
		return allowed, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := f.accessReview(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed, ttl := review.Status.Allowed, allowedTTL
	if !allowed {
		ttl = deniedTTL
	}
	store(f, f.access, key, allowed, ttl)
	return allowed, nil
}

// accessKey names a user's access to a verb on a path: every field of the
// user, since any may change the decision.
func accessKey(user *authenticationv1.UserInfo, verb, path string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q %q %q", verb, path, user.Username, user.UID, user.Groups)
	for _, k := range slices.Sorted(maps.Keys(user.Extra)) {
		fmt.Fprintf(&b, " %q=%q", k, []string(user.Extra[k]))
	}
	return b.String()
}

// lookup returns the live entry of key in cache.
func lookup[K comparable, V any](f *Filter, cache map[K]entry[V], key K) (V, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := cache[key]
	if !ok || !f.now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

// store caches value under key for ttl, making room first if the cache is
// full: expired entries go, and if none has, all of them.
func store[K comparable, V any](f *Filter, cache map[K]entry[V], key K, value V, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if len(cache) >= maxEntries {
		for k, e := range cache {
			if !now.Before(e.expires) {
				delete(cache, k)
			}
		}
		if len(cache) >= maxEntries {
			clear(cache)
		}
	}
	cache[key] = entry[V]{value: value, expires: now.Add(ttl)}
}
