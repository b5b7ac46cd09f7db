package ctrl

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Creates whose reply was lost. Kubernetes has no idempotency key for a
// create: a create whose connection died after the request was sent may or
// may not have happened, and the retry finds AlreadyExists either way. So
// each create of a named object carries a value of its own, in an
// annotation, and a create that lost its reply is remembered with that
// value until a later create of the same key settles it.

// createIDAnnotation holds the value unique to the create request that
// made the object.
const createIDAnnotation = "ctrl.dev/create-id"

// lostCreateTTL bounds how long a lost create is remembered: a program that
// never creates the key again does not keep it for its life.
const lostCreateTTL = 10 * time.Minute

// stampCreate returns a copy of obj carrying a new create ID, and the ID.
// The caller's object is left alone: it may be shared.
func stampCreate[T Object](obj T) (T, string) {
	id := strconv.FormatUint(rand.Uint64(), 36)
	obj = obj.DeepCopyObject().(T)
	a := maps.Clone(obj.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[createIDAnnotation] = id
	obj.SetAnnotations(a)
	return obj, id
}

// lostCreates are the creates of a manager whose reply was lost.
type lostCreates struct {
	mu sync.Mutex
	m  map[lostKey]lostCreate
}

type lostKey struct {
	binding any // the client's binding: the type and resource
	key     Key
}

// lostCreate is what is remembered of the lost attempts to create a key:
// the ID of each (a retry can lose its reply too), and when the last was.
type lostCreate struct {
	ids []string
	at  time.Time
}

// maxLostIDs bounds the IDs kept per key.
const maxLostIDs = 4

// settle records the outcome err of the create of key with id through c.
// After a create that failed because the server could not be reached, it
// remembers id; after an AlreadyExists, it reads the object, and if it
// carries the id of an earlier create whose reply was lost, returns it and
// true: that create did happen.
func (l *lostCreates) settle(ctx context.Context, c anyClient, key Key, id string, err error) (Object, bool) {
	lk := lostKey{c.binding(), key}
	l.mu.Lock()
	prev, had := l.m[lk]
	switch _, lost := serverUnreachable(err); {
	case err == nil:
		delete(l.m, lk)
	case lost:
		if l.m == nil {
			l.m = map[lostKey]lostCreate{}
		}
		now := time.Now()
		for k, e := range l.m {
			if now.Sub(e.at) > lostCreateTTL {
				delete(l.m, k)
			}
		}
		prev.ids = append(prev.ids, id)
		if len(prev.ids) > maxLostIDs {
			prev.ids = prev.ids[1:]
		}
		l.m[lk] = lostCreate{prev.ids, now}
		had = false // recognized at the next attempt
	case apierrors.IsAlreadyExists(err):
		delete(l.m, lk)
	default:
		had = false // nothing settled: keep the lost one for the next attempt
	}
	l.mu.Unlock()
	if !had || !apierrors.IsAlreadyExists(err) {
		return nil, false
	}
	obj, gerr := c.getLive(ctx, key)
	if gerr != nil || !slices.Contains(prev.ids, obj.GetAnnotations()[createIDAnnotation]) {
		return nil, false
	}
	return obj, true
}

// anyClient is what lostCreates needs of a Client of any type.
type anyClient interface {
	binding() any
	getLive(ctx context.Context, key Key) (Object, error)
}

func (c *Client[T]) binding() any { return c.b }

func (c *Client[T]) getLive(ctx context.Context, key Key) (Object, error) {
	b, err := c.backend(key.Cluster)
	if err != nil {
		return nil, err
	}
	return b.Get(ctx, key.Namespace, key.Name, metav1.GetOptions{})
}
