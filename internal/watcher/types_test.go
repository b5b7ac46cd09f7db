package watcher

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestReflectorChecksEventTypes sends objects of other types on a watch of
// ConfigMaps, as client-go's reflector checks for: a Status among a
// streamed list's objects, a Secret among the changes. Each is the watch's
// error, reported, and the cache relists rather than go on without the
// object or store one of another type.
func TestReflectorChecksEventTypes(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var errs []string
	streamed, watched := 0, 0
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "12"}, Items: []corev1.ConfigMap{*cm("a", "10"), *cm("b", "11")}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			w := watch.NewFakeWithChanSize(10, false)
			switch {
			case opts.SendInitialEvents != nil && streamed == 0:
				streamed++
				w.Add(cm("a", "10"))
				w.Add(&metav1.Status{Status: metav1.StatusFailure, Message: "b went wrong"})
				w.Action(watch.Bookmark, bookmark("12", true))
			case opts.SendInitialEvents != nil:
				return nil, apierrors.NewBadRequest("sendInitialEvents is not supported")
			case watched == 0:
				watched++
				w.Modify(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "13"}})
			}
			return w, nil
		},
	}
	store := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Name: "configmaps", ListerWatch: lw, Store: store, Logger: logr.Discard(),
			Types: []reflect.Type{reflect.TypeFor[*corev1.ConfigMap]()},
			OnError: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err.Error())
			}})
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	defer stop()
	reported := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
	want := []string{"replace [a@10 b@11] at 12", "replace [a@10 b@11] at 12"}
	waitFor(t, "two lists, or a wrong first", func() bool {
		ops := store.all()
		return len(ops) >= 2 || len(ops) == 1 && ops[0] != want[0]
	})
	stop()
	if got := store.all(); !slices.Equal(got, want) {
		t.Errorf("store saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got := reported()
	for _, want := range []string{
		`configmaps: a ADDED event of *v1.Status, want *v1.ConfigMap`,
		`configmaps: a MODIFIED event of *v1.Secret ns/s, want *v1.ConfigMap`,
	} {
		if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("errors reported: %q; want one containing %q", got, want)
		}
	}
}

// TestReflectorChecksUnstructuredKinds checks the kind of unstructured
// objects, whose Go type says nothing, as client-go's expectedGVK does.
func TestReflectorChecksUnstructuredKinds(t *testing.T) {
	var reported []error
	r := newReflector("widgets", &cache.ListWatch{}, &recorder{}, logr.Discard(), Backoff, 0)
	r.types, r.gvk = []reflect.Type{reflect.TypeFor[*unstructured.Unstructured]()}, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	r.report = func(err error) { reported = append(reported, err) }
	object := func(apiVersion, kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace("ns")
		u.SetName("w")
		u.SetResourceVersion("5")
		return u
	}
	w := watch.NewFakeWithChanSize(10, false)
	w.Add(object("example.com/v1", "Widget"))
	w.Add(object("example.com/v2", "Widget"))
	store := &recorder{}
	_, err := r.consume(context.Background(), time.Now(), chanEvents{context.Background(), w}, store, false, func(string, bool) bool { return true })
	want := `widgets: a ADDED event of apiVersion "example.com/v2", kind "Widget" ns/w, want *unstructured.Unstructured of apiVersion "example.com/v1", kind "Widget"`
	if err == nil || err.Error() != want {
		t.Errorf("got error %v, want %s", err, want)
	}
	if len(reported) != 1 || reported[0] != err {
		t.Errorf("reported %v, want the error", reported)
	}
	if got := store.all(); !slices.Equal(got, []string{"add w@5"}) {
		t.Errorf("store saw %v, want the v1 Widget only", got)
	}
}
