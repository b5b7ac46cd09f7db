// Package lostcreate recognizes a create whose reply was lost. Kubernetes
// has no idempotency key for a create: one whose connection died after
// the request left may or may not have happened, and its retry finds
// AlreadyExists either way. So each create of a named object carries a
// value of its own in an annotation, and a create that lost its reply is
// remembered with that value until a later create of the same key settles
// it.
package lostcreate

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
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedctrl/ctrl/internal/probe"
)

// annotation holds the value unique to the create request that made the
// object.
const annotation = "ctrl.dev/create-id"

// ttl bounds how long a lost create is remembered: a program that never
// creates the key again does not keep it for its life.
const ttl = 10 * time.Minute

// maxIDs bounds the IDs kept per key.
const maxIDs = 4

// Object is an API object: the metadata read and stamped, and the copy
// that keeps a stamp off the caller's object.
type Object interface {
	metav1.Object
	DeepCopyObject() runtime.Object
}

// Stamp returns a copy of obj carrying a new create ID, and the ID. The
// caller's object is left alone: it may be shared.
func Stamp[T Object](obj T) (T, string) {
	id := strconv.FormatUint(rand.Uint64(), 36)
	obj = obj.DeepCopyObject().(T)
	a := maps.Clone(obj.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[annotation] = id
	obj.SetAnnotations(a)
	return obj, id
}

// Creates are the creates of one manager whose reply was lost, by the
// resource and key of their object. The zero value is ready; it is safe
// for concurrent use.
type Creates[K comparable] struct {
	mu sync.Mutex
	m  map[entryKey[K]]lost
}

type entryKey[K comparable] struct {
	resource any
	key      K
}

// lost is what is remembered of the lost attempts to create a key: the ID
// of each (a retry can lose its reply too), and when the last was.
type lost struct {
	ids []string
	at  time.Time
}

// Settle records err, the outcome of the create of key, of resource, that
// carried id. After a create that could not reach the server (see
// [probe.Unreachable]) it remembers id; after an AlreadyExists, it reads the
// object with get, and if it carries the id of an earlier create whose
// reply was lost, returns it and true: that create did happen.
func (c *Creates[K]) Settle(ctx context.Context, resource any, key K, id string, err error,
	get func(context.Context) (metav1.Object, error)) (metav1.Object, bool) {
	k := entryKey[K]{resource, key}
	c.mu.Lock()
	prev, had := c.m[k]
	switch _, unreachable := probe.Unreachable(err); {
	case err == nil:
		delete(c.m, k)
	case unreachable:
		if c.m == nil {
			c.m = map[entryKey[K]]lost{}
		}
		now := time.Now()
		for old, e := range c.m {
			if now.Sub(e.at) > ttl {
				delete(c.m, old)
			}
		}
		prev.ids = append(prev.ids, id)
		if len(prev.ids) > maxIDs {
			prev.ids = prev.ids[1:]
		}
		c.m[k] = lost{prev.ids, now}
		had = false // recognized at the next attempt
	case apierrors.IsAlreadyExists(err):
		delete(c.m, k)
	default:
		had = false // nothing settled: keep the lost one for the next attempt
	}
	c.mu.Unlock()
	if !had || !apierrors.IsAlreadyExists(err) {
		return nil, false
	}
	obj, gerr := get(ctx)
	if gerr != nil || !slices.Contains(prev.ids, obj.GetAnnotations()[annotation]) {
		return nil, false
	}
	return obj, true
}
