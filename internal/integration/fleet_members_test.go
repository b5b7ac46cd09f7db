package integration_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// TestFleetMembers runs a manager on the hub (the suite's control plane)
// over two member control planes, found as kubeconfig files in a
// directory. A controller mirrors a hub ConfigMap into every member. A
// member joins when its file appears and gets its copy; a member whose API
// server dies does not hold up the other, which keeps converging; it
// catches up once its server is back; a member whose file is removed
// leaves, and its watches and goroutines are gone.
func TestFleetMembers(t *testing.T) {
	var members [2]*ctrltest.Env
	var memberCS [2]kubernetes.Interface
	for i := range members {
		e, err := ctrltest.New(ctrltest.Options{})
		must(t, err)
		t.Cleanup(func() { must(t, e.Stop()) })
		members[i] = e
		memberCS[i], err = kubernetes.NewForConfig(e.Config())
		must(t, err)
	}
	dir := t.TempDir()
	join := func(name string, e *ctrltest.Env) {
		t.Helper()
		data, err := os.ReadFile(e.KubeconfigPath())
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, name+".yaml.tmp"), data, 0o600))
		must(t, os.Rename(filepath.Join(dir, name+".yaml.tmp"), filepath.Join(dir, name+".yaml")))
	}
	join("east", members[0])

	ns := newNamespace(t)
	ctx := context.Background()
	_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Labels: map[string]string{"mirror": "yes"}},
		Data:       map[string]string{"v": "1"}}, metav1.CreateOptions{})
	must(t, err)

	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns, ClusterProvider: ctrl.KubeconfigDir(dir, ctrl.KubeconfigOptions{})})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	mirror := labels.SelectorFromSet(labels.Set{"mirror": "yes"})
	var mu sync.Mutex
	failures := map[string]int{} // by member: reconciles that could not write there
	c, err := ctrl.NewController(mgr, "mirror", func(ctx context.Context, src *corev1.ConfigMap) (ctrl.Result, error) {
		var firstErr error
		for _, member := range mgr.Clusters() {
			// Each member on its own: one that is down does not stop the
			// others from getting the change.
			_, _, err := configMaps.InCluster(member).CreateOrPatch(ctx, ctrl.Key{Namespace: "default", Name: src.Name}, func(cm *corev1.ConfigMap) error {
				cm.Labels = map[string]string{"mirror": "yes"}
				cm.Data = maps.Clone(src.Data)
				return nil
			})
			if err != nil {
				mu.Lock()
				failures[member]++
				mu.Unlock()
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		return ctrl.Result{}, firstErr
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: mirror}})
	must(t, err)
	copies, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{Fleet: true, Namespaces: []string{"default"}, LabelSelector: mirror})
	must(t, err)
	must(t, ctrl.Watches(c, copies, func(cm *corev1.ConfigMap) []ctrl.Key {
		return []ctrl.Key{{Namespace: ns, Name: cm.Name}}
	}))
	start(t, mgr)

	copyIs := func(i int, v string) func() error {
		return func() error {
			cm, err := memberCS[i].CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cm.Data["v"] != v {
				return fmt.Errorf("member %d: copy at v=%s, want %s", i, cm.Data["v"], v)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, copyIs(0, "1"))

	// A member joins: its file appears, it is listed, and it gets its copy.
	// Watches that were busy (the first lists) read from HTTP/1.1
	// connections of their own until they are quiet: once they are back on
	// the shared connections, the goroutines present are the ones that stay.
	watchesShared(t)
	before := goleak.IgnoreCurrent()
	readers := watchReaders()
	join("west", members[1])
	took := eventually(t, 30*time.Second, copyIs(1, "1"))
	t.Logf("west had its copy %s after its kubeconfig appeared", took.Round(time.Millisecond))

	// West's API server dies; east keeps converging meanwhile.
	must(t, members[1].StopAPIServer())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = members[1].StartAPIServer()
		}
	})
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{})
	must(t, err)
	took = eventually(t, 30*time.Second, copyIs(0, "2"))
	t.Logf("east converged %s after the change, with west down", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("east converged %s after the change while west was down, want within 10s", took.Round(time.Millisecond))
	}
	if _, err := memberCS[1].CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); err == nil {
		t.Fatal("west answered while its API server was stopped")
	}

	// West is back and catches up.
	must(t, members[1].StartAPIServer())
	restarted = true
	took = eventually(t, 30*time.Second, copyIs(1, "2"))
	t.Logf("west converged %s after its API server was back", took.Round(time.Millisecond))
	mu.Lock()
	t.Logf("reconciles that could not write to a member: %v", failures)
	mu.Unlock()

	// West leaves: its file goes, and so do its watches and goroutines.
	must(t, os.Remove(filepath.Join(dir, "west.yaml")))
	// Clusters stops naming west before its caches have let its objects
	// go: wait for both.
	eventually(t, 30*time.Second, func() error {
		if got := mgr.Clusters(); !slices.Equal(got, []string{"east"}) {
			return fmt.Errorf("members: got %v, want [east]", got)
		}
		if _, ok := copies.Get(ctrl.Key{Namespace: "default", Name: "settings", Cluster: "west"}); ok {
			return errors.New("west's objects are still cached after it left")
		}
		return nil
	})
	// A request in flight on a connection that stays is not west's: a
	// watch of this cluster or east's that moved between connections
	// meanwhile (west's connections, and their requests, close with it:
	// TestFleetMemberConnectionsClosed).
	inFlight := goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientStream).writeRequest")
	// A watch's reading moves to a new goroutine when a reconcile on its
	// reader writes: the readers are counted, not named.
	reading := goleak.IgnoreAnyFunction("github.com/typedctrl/ctrl/internal/watcher.(*cycle).run")
	if err := goleak.Find(append(leakIgnores(), before, inFlight, reading)...); err != nil {
		t.Errorf("goroutines of the member that left: %v", err)
	}
	eventually(t, 30*time.Second, func() error {
		if n := watchReaders(); n != readers {
			return fmt.Errorf("%d goroutines read watches, want the %d before west joined", n, readers)
		}
		return nil
	})
	// East still works.
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"v":"3"}}`), metav1.PatchOptions{})
	must(t, err)
	eventually(t, 30*time.Second, copyIs(0, "3"))
	if err := memberCS[1].CoreV1().ConfigMaps("default").Delete(ctx, "settings", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// TestFleetMemberConnectionsClosed engages and disengages one member ten
// times while a fleet-wide controller watches it: each time the member
// leaves, its connections close, with their reader goroutines, though its
// watches were streaming an instant before (the member is the suite's own
// control plane, reached through a Config of its own).
func TestFleetMemberConnectionsClosed(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	_, err := ctrl.NewController(mgr, "fleet-watcher", func(context.Context, *corev1.ConfigMap) (ctrl.Result, error) {
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Fleet: true, Namespaces: []string{ns}}})
	must(t, err)
	start(t, mgr)
	waitIdle(t, mgr)
	watchesShared(t)
	baseline := readLoops()
	for i := range 10 {
		must(t, mgr.Engage("member", ctrl.Member{Config: env.Config()}))
		waitIdle(t, mgr) // listed and watching
		if got := readLoops(); got <= baseline {
			t.Fatalf("cycle %d: %d connection readers while engaged, want more than the %d before", i, got, baseline)
		}
		mgr.Disengage("member")
		// Closing a connection ends its reader at once; this waits for the
		// scheduler, not for a timeout.
		eventually(t, 10*time.Second, func() error {
			if got := readLoops(); got != baseline {
				return fmt.Errorf("cycle %d: %d connection readers after the member left, want %d", i, got, baseline)
			}
			return nil
		})
	}
}

// stacks returns every goroutine's stack.
func stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// readLoops counts the goroutines that read client connections: HTTP/2
// connections, and the HTTP/1.1 connections busy watches read from.
func readLoops() int {
	s := stacks()
	return strings.Count(s, "http2.(*ClientConn).readLoop") + strings.Count(s, "net/http.(*persistConn).readLoop")
}

// watchesShared waits until no watch reads from an HTTP/1.1 connection of
// its own: a watch leaves one once it has been quiet for the manager's
// ConnectionCheck (3 s).
func watchesShared(t *testing.T) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		if n := strings.Count(stacks(), "net/http.(*persistConn).readLoop"); n > 0 {
			return fmt.Errorf("%d HTTP/1.1 connections open", n)
		}
		return nil
	})
}

// watchReaders counts the goroutines that read a watch, or run a
// reconcile on a watch's reader.
func watchReaders() int {
	return strings.Count(stacks(), "internal/watcher.(*cycle).run(")
}
