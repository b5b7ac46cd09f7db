package objects

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Expectation is a write of this program that the store has not observed.
type Expectation struct {
	RV       string // observed once the object, or its feed, reaches this version
	Deleting bool   // observed once the object is gone or has a deletionTimestamp
	Gone     bool   // observed once the object is gone
	Writes   int    // fake backends: events still to come
}

// String says what observes e: "resourceVersion 12", "its deletion".
func (e Expectation) String() string {
	switch {
	case e.Writes > 0:
		return fmt.Sprintf("%d writes", e.Writes)
	case e.Gone:
		return "the removal"
	case e.Deleting:
		return "its deletion"
	}
	return "resourceVersion " + e.RV
}

// Expect records e for k, replacing what k had.
func (s *Store[T]) Expect(k Key, e Expectation) {
	if s.expect == nil {
		s.expect = map[Key]Expectation{}
	}
	s.expect[k] = e
}

// Expecting returns k's expectation.
func (s *Store[T]) Expecting(k Key) (Expectation, bool) {
	e, ok := s.expect[k]
	return e, ok
}

// Expected returns the number of expectations.
func (s *Store[T]) Expected() int { return len(s.expect) }

// Pending reports whether a write to k is still to be observed.
func (s *Store[T]) Pending(k Key) bool {
	_, ok := s.expect[k]
	return ok
}

// Holds reports whether obj is still k's object with no write to k
// pending: obj is then the newest state this program knows.
func (s *Store[T]) Holds(k Key, obj T) bool {
	if s.Pending(k) {
		return false
	}
	cur, ok := s.Get(k)
	return ok && any(cur) == any(obj)
}

// Version returns the newest resourceVersion this program knows for k: a
// pending write's, else the stored object's; "" if none, or deleted.
func (s *Store[T]) Version(k Key) string {
	if e, ok := s.expect[k]; ok {
		return e.RV
	}
	if cur, ok := s.Get(k); ok {
		return cur.GetResourceVersion()
	}
	return ""
}

// Observe settles k's expectation with obj (present false: gone) as it
// arrives; fake: from a fake backend, which counts events.
func (s *Store[T]) Observe(k Key, obj T, present, fake bool) {
	e, ok := s.expect[k]
	if !ok {
		return
	}
	if fake {
		// A fake's last-finalizer removal sends an update, then the removal.
		if e.Writes--; e.Writes > 0 || e.Gone && present {
			s.expect[k] = e
			return
		}
	} else if present && !seen(e, obj) {
		return
	}
	delete(s.expect, k)
}

func seen[T metav1.Object](e Expectation, obj T) bool {
	if e.Gone {
		return false
	}
	if e.Deleting {
		return obj.GetDeletionTimestamp() != nil
	}
	return Newer(obj.GetResourceVersion(), e.RV)
}

// Newer reports whether resourceVersion a is at or past b. A version that
// cannot be compared counts as past: it cannot be waited for.
func Newer(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || cmp >= 0
}

// Wrote records a successful write to k (of cluster k.Cluster) that
// returned obj, or deleted it, until the store observes it. lastRV is how
// far the feed of k has seen ("": not listed); outside reports an object
// that no event will bring, outside the cache's selectors.
func (s *Store[T]) Wrote(k Key, obj T, deleted bool, lastRV string, outside func(T) bool) {
	e := Expectation{Deleting: deleted}
	if !deleted {
		// A create with generateName has its name now.
		k = Key{Namespace: obj.GetNamespace(), Name: obj.GetName(), Cluster: k.Cluster}
		e.RV = obj.GetResourceVersion()
		// Deleted by the server on update: only its removal settles this.
		e.Gone = removedBy(obj)
	}
	cur, cached := s.Get(k)
	if e.Gone && cached && !Newer(cur.GetResourceVersion(), e.RV) {
		e.Gone = false // an update the server kept: wait for its version
	}
	switch {
	case (deleted || e.Gone) && !cached:
		if prev, ok := s.expect[k]; deleted && ok && prev.RV != "" && !prev.Gone {
			// Deleted before the store has its create (or an update): it
			// comes, then its deletion, which this waits for too.
			s.expect[k] = Expectation{RV: prev.RV, Deleting: true}
		}
	case cached && seen(e, cur):
	case !deleted && !e.Gone && lastRV != "" && Newer(lastRV, e.RV):
		// Events come in resourceVersion order: the feed is past this
		// write (its DELETED beat the reply). An unlisted feed is past nothing.
	case !deleted && !e.Gone && !cached && outside(obj):
		// Outside the cache's selector: no event will come.
	default:
		s.Expect(k, e)
	}
}

// removedBy: deleted with no finalizers nor grace, which the server then removes.
func removedBy(obj metav1.Object) bool {
	return obj.GetDeletionTimestamp() != nil && len(obj.GetFinalizers()) == 0 &&
		(obj.GetDeletionGracePeriodSeconds() == nil || *obj.GetDeletionGracePeriodSeconds() == 0)
}

// WillWrite counts a write to k through a fake backend, which sends its
// event before the write returns.
func (s *Store[T]) WillWrite(k Key) {
	e := s.expect[k]
	e.Writes++
	s.Expect(k, e)
}

// FakeWrote takes the outcome of a write counted by WillWrite. It reports
// an update that the fake then removes: a stored object's expectation now
// waits for the removal.
func (s *Store[T]) FakeWrote(k Key, obj T, deleted bool, err error) bool {
	if err == nil {
		if deleted || !removedBy(obj) {
			return false
		}
		if _, cached := s.Get(k); cached {
			e := s.expect[k]
			e.Gone = true
			s.Expect(k, e)
		}
		return true
	}
	if e, ok := s.expect[k]; ok {
		if e.Writes--; e.Writes > 0 {
			s.expect[k] = e
		} else {
			delete(s.expect, k)
		}
	}
	return false
}

// Settle drops the expectations of writes that their feeds, at lastRV(k),
// passed unseen.
func (s *Store[T]) Settle(lastRV func(Key) string) {
	for k, e := range s.expect {
		if e.RV == "" || e.Gone { // the object's own removal settles it
			continue
		}
		if rv := lastRV(k); rv != "" && Newer(rv, e.RV) {
			if _, cached := s.Get(k); e.Deleting && cached {
				continue // created, and its deletion still to come
			}
			delete(s.expect, k)
		}
	}
}

// Forget drops the expectations of the keys match matches: no event will
// settle them.
func (s *Store[T]) Forget(match func(Key) bool) {
	for k := range s.expect {
		if match(k) {
			delete(s.expect, k)
		}
	}
}

// Waiting returns one expectation, and how many there are.
func (s *Store[T]) Waiting() (k Key, e Expectation, n int) {
	for k, e := range s.expect {
		return k, e, len(s.expect)
	}
	return Key{}, Expectation{}, 0
}
