// Package access lets the API server decide who may reach the manager's
// HTTPS endpoints, as kube-rbac-proxy and controller-runtime's
// metrics/filters do, without their dependency on k8s.io/apiserver: a
// request's bearer token is checked with a TokenReview, and its user's
// right to the request's path and verb with a SubjectAccessReview for a
// non-resource URL (RBAC's nonResourceURLs, such as "/metrics" with
// verb "get").
//
// Answers are cached, so that a scraper costs the API server two requests
// a few times an hour, not two per scrape: a token's review for a minute
// (30 seconds if it did not authenticate), an allowed access for five, a
// denied one for 30 seconds (the durations of controller-runtime's
// filter). Errors are not cached: the request fails with 500 and the next
// one asks again.
//
// Anyone who can reach the endpoint can send made-up tokens, and each
// costs a TokenReview. So what an unauthenticated client can make the
// manager spend is bounded, and no one client can spend it all:
//   - tokens that never authenticated are reviewed at most reviewRate a
//     second (reviewBurst at once), and of those at most sourceRate a
//     second (sourceBurst at once) for one client address; past that a
//     request gets 429 with Retry-After, and the API server sees nothing.
//     A flood from one address leaves the rest to new scrapers elsewhere;
//   - a token that authenticated before is reviewed again whenever its
//     answer expires, flood or not;
//   - concurrent requests that need one review (a token's, or a user's
//     access to a verb on a path) share it: one is sent, all wait for it;
//   - good answers (authenticated, allowed) and bad ones are cached apart,
//     each bounded, so bad ones never push good ones out.
package access

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
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
	// reviewRate and reviewBurst bound the TokenReviews of tokens not
	// known to authenticate: a few scrapers with new tokens need a handful
	// a minute.
	reviewRate  = 10
	reviewBurst = 20
	// sourceRate and sourceBurst bound those of one client address: a
	// scraper needs one review per new token, and one address cannot take
	// more than a fifth of reviewRate.
	sourceRate  = 2
	sourceBurst = 5
	// maxSources bounds the client addresses tracked: an address whose
	// bucket has refilled needs no entry.
	maxSources = 4096
)

// Filter authenticates and authorizes requests through the API server
// before passing them on. Create it with [New]. It is safe for concurrent
// use.
type Filter struct {
	tokenReview  func(context.Context, *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error)
	accessReview func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)
	log          logr.Logger
	now          func() time.Time

	mu      sync.Mutex
	tokens  answers[[sha256.Size]byte, *authenticationv1.UserInfo] // nil user: not authenticated
	access  answers[string, bool]
	reviews limiter // of tokens not known to authenticate
}

// answers caches the answers of reviews: good ones (a user, an allowance)
// and bad ones apart, so that a flood of bad ones leaves the good alone.
// A good answer stays after it expires, until room is needed: its key is
// known to have been good. asking holds the reviews in flight, which
// concurrent requests for the same key wait for instead of sending their
// own.
type answers[K comparable, V any] struct {
	good, bad map[K]entry[V]
	asking    map[K]*flight[V]
}

// flight is a review in flight; done is closed once value and err are set.
type flight[V any] struct {
	done  chan struct{}
	value V
	err   error
}

type entry[V any] struct {
	value   V
	expires time.Time
}

func newAnswers[K comparable, V any]() answers[K, V] {
	return answers[K, V]{good: map[K]entry[V]{}, bad: map[K]entry[V]{}, asking: map[K]*flight[V]{}}
}

// errTooMany refuses a token when the reviews of unknown tokens are used up.
var errTooMany = errors.New("too many new tokens")

// New returns a filter that asks the API server through tokenReview and
// accessReview, which create the review they are given and return the
// server's answer, and logs refusals and errors to log.
func New(tokenReview func(context.Context, *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error),
	accessReview func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error),
	log logr.Logger) *Filter {
	return &Filter{
		tokenReview: tokenReview, accessReview: accessReview, log: log, now: time.Now,
		tokens:  newAnswers[[sha256.Size]byte, *authenticationv1.UserInfo](),
		access:  newAnswers[string, bool](),
		reviews: limiter{all: bucket{rate: reviewRate, burst: reviewBurst}, sources: map[string]*bucket{}},
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
		user, err := f.authenticate(r.Context(), token, clientAddress(r.RemoteAddr))
		if errors.Is(err, errTooMany) {
			f.log.V(1).Info("refused a request: too many new tokens", "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests with new tokens: retry later", http.StatusTooManyRequests)
			return
		}
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

// clientAddress returns the address of a request's client, without its
// port: one client opens connections from many ports.
func clientAddress(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// authenticate returns the user of token, or nil if the API server does not
// recognize it, or errTooMany if the token is not known to authenticate and
// no review is left for it and source, its client's address. Only a digest
// of the token is kept.
func (f *Filter) authenticate(ctx context.Context, token, source string) (*authenticationv1.UserInfo, error) {
	admit := func(known bool, now time.Time) bool { return known || f.reviews.take(source, now) }
	return ask(ctx, f, &f.tokens, sha256.Sum256([]byte(token)), admit,
		func(ctx context.Context) (*authenticationv1.UserInfo, bool, time.Duration, error) {
			review, err := f.tokenReview(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}})
			if err != nil {
				return nil, false, 0, fmt.Errorf("TokenReview: %w", err)
			}
			if !review.Status.Authenticated {
				return nil, false, deniedTTL, nil
			}
			return &review.Status.User, true, authenticatedTTL, nil
		})
}

// authorize reports whether user may use verb on path.
func (f *Filter) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	return ask(ctx, f, &f.access, accessKey(user, verb, path), nil, func(ctx context.Context) (bool, bool, time.Duration, error) {
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		review, err := f.accessReview(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		}})
		if err != nil {
			return false, false, 0, fmt.Errorf("SubjectAccessReview: %w", err)
		}
		if !review.Status.Allowed {
			return false, false, deniedTTL, nil
		}
		return true, true, allowedTTL, nil
	})
}

// ask returns the answer of key: the cached one if it is live, else that
// of the review in flight for key, else that of a new review, sent only if
// admit (nil: always) allows it for a key known to have been good or not;
// else errTooMany. The review answers every request waiting for it, so it
// runs past the cancellation of the request that sent it, within
// reviewTimeout. Its answer is cached for the ttl it returns, among the
// good or the bad; an error is not cached.
func ask[K comparable, V any](ctx context.Context, f *Filter, a *answers[K, V], key K, admit func(known bool, now time.Time) bool,
	review func(context.Context) (value V, good bool, ttl time.Duration, err error)) (V, error) {
	var zero V
	f.mu.Lock()
	now := f.now()
	value, ok, known := lookup(*a, key, now)
	fl := a.asking[key]
	switch {
	case ok:
		f.mu.Unlock()
		return value, nil
	case fl != nil:
		f.mu.Unlock()
		select {
		case <-fl.done:
			return fl.value, fl.err
		case <-ctx.Done():
			return zero, context.Cause(ctx)
		}
	case admit != nil && !admit(known, now):
		f.mu.Unlock()
		return zero, errTooMany
	}
	fl = &flight[V]{done: make(chan struct{}), err: errors.New("the review panicked")}
	a.asking[key] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(a.asking, key)
		close(fl.done)
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
	defer cancel()
	value, good, ttl, err := review(rctx)
	fl.value, fl.err = value, err
	if err == nil {
		store(f, a, key, value, good, ttl)
	}
	return value, err
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

// lookup returns the live answer of key, and whether key had a good
// answer once (live or not). Called with f.mu held.
func lookup[K comparable, V any](a answers[K, V], key K, now time.Time) (value V, ok, known bool) {
	e, known := a.good[key]
	if !known {
		e, ok = a.bad[key]
	}
	if (known || ok) && now.Before(e.expires) {
		return e.value, true, known
	}
	var zero V
	return zero, false, known
}

// store caches value under key for ttl, among the good answers or the bad,
// making room first in a full cache: expired entries go, and if none has,
// the one that expires first. Only tokens that authenticated and users the
// API server knows reach the good answers, and bad answers arrive no
// faster than the reviews of new tokens allow.
func store[K comparable, V any](f *Filter, a *answers[K, V], key K, value V, good bool, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	delete(a.good, key)
	delete(a.bad, key)
	m := a.bad
	if good {
		m = a.good
	}
	if len(m) >= maxEntries {
		var first K
		var firstAt time.Time
		for k, e := range m {
			switch {
			case !now.Before(e.expires):
				delete(m, k)
			case firstAt.IsZero() || e.expires.Before(firstAt):
				first, firstAt = k, e.expires
			}
		}
		if len(m) >= maxEntries {
			delete(m, first)
		}
	}
	m[key] = entry[V]{value: value, expires: now.Add(ttl)}
}

// limiter bounds the reviews of tokens not known to authenticate: all of
// them, and those of each client address.
type limiter struct {
	all     bucket
	sources map[string]*bucket // by client address; absent: full
}

// take takes a review for source if both source and all have one left.
// Called with f.mu held.
func (l *limiter) take(source string, now time.Time) bool {
	b, tracked := l.sources[source]
	if !tracked {
		b = &bucket{rate: sourceRate, burst: sourceBurst}
	}
	if !b.has(now) || !l.all.has(now) {
		return false
	}
	b.tokens--
	l.all.tokens--
	if !tracked {
		// Reached at most reviewRate a second, so the scan costs little.
		// An address whose bucket refilled needs no entry; if every one is
		// in use, they are many addresses, which all is there to bound:
		// each starts again with a full bucket.
		if len(l.sources) >= maxSources {
			for k, o := range l.sources {
				if o.has(now) && o.tokens >= o.burst {
					delete(l.sources, k)
				}
			}
			if len(l.sources) >= maxSources {
				clear(l.sources)
			}
		}
		l.sources[source] = b
	}
	return true
}

// bucket is a token bucket: rate tokens a second, burst at most.
type bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// has refills b up to now and reports whether it holds a token.
func (b *bucket) has(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	if now.After(b.last) {
		b.last = now
	}
	return b.tokens >= 1
}
