package integration_test

// The operator author's first week (issue 12) on a real API server: filters
// on secondary watches, create-or-patch and patches from a changed copy,
// caches over several namespaces, kinds known only at run time, paged and
// field-selected live reads, and a custom resource without a status
// subresource.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
)

// requestLog records the requests of a manager (rest.Config.Wrap), with the
// body of each patch, to count what a call sent to the server.
type requestLog struct {
	mu       sync.Mutex
	requests []string // "GET /api/v1/namespaces/ns/configmaps?limit=10"
	patches  []string // bodies of PATCH requests
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		desc := r.Method + " " + r.URL.Path
		if r.URL.RawQuery != "" {
			desc += "?" + r.URL.RawQuery
		}
		var body []byte
		if r.Method == http.MethodPatch && r.GetBody != nil {
			if rc, err := r.GetBody(); err == nil {
				body, _ = io.ReadAll(rc)
				rc.Close()
			}
		}
		l.mu.Lock()
		l.requests = append(l.requests, desc)
		if body != nil {
			l.patches = append(l.patches, string(body))
		}
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// take returns the requests and patch bodies recorded since the last take,
// leaving out watches, which a running cache keeps open.
func (l *requestLog) take() (requests, patches []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.requests {
		if !strings.Contains(r, "watch=true") {
			requests = append(requests, r)
		}
	}
	patches = l.patches
	l.requests, l.patches = nil, nil
	return requests, patches
}

// loggedManager returns a manager of ns whose requests go through a
// requestLog.
func loggedManager(t *testing.T, ns string) (*ctrl.Manager, *requestLog) {
	t.Helper()
	log := &requestLog{}
	cfg := env.Config()
	cfg.Wrap(log.wrap)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	return mgr, log
}

// causeLog records the causes of a controller's reconciles, by object name.
type causeLog struct {
	mu     sync.Mutex
	causes map[string][]ctrl.Causes
}

func (l *causeLog) add(ctx context.Context, obj metav1.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.causes == nil {
		l.causes = map[string][]ctrl.Causes{}
	}
	l.causes[obj.GetName()] = append(l.causes[obj.GetName()], ctrl.RequestFrom(ctx).Causes)
}

// take returns the causes recorded since the last take, as strings.
func (l *causeLog) take() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for name, cs := range l.causes {
		for _, c := range cs {
			out[name] = append(out[name], c.String())
		}
	}
	l.causes = nil
	return out
}

// newDeployment returns a valid Deployment. No kube-controller-manager runs
// in the suite: it never gets pods, and its status is whatever a test
// writes.
func newDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
			},
		},
	}
}

// TestToolkitOwnsGenerationChanged has each Widget own a Deployment with as
// many replicas as its size, written with CreateOrPatch, and owns the
// Deployments filtered with GenerationChanged: writes to a Deployment's
// status and labels, which do not bump its generation, do not reconcile the
// Widget; a change to its spec does, and is undone. A second controller
// owns the same Deployments without a filter, to show that the skipped
// writes did reach the cache.
func TestToolkitOwnsGenerationChanged(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	deployments := newClient[*appsv1.Deployment](t, mgr)
	var filtered, unfiltered causeLog
	c, err := ctrl.NewController(mgr, "app", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		filtered.add(ctx, w)
		_, _, err := deployments.CreateOrPatch(ctx, ctrl.KeyOf(w), func(d *appsv1.Deployment) error {
			if d.Spec.Selector == nil { // new: the fields set once
				d.Spec = newDeployment(w.Namespace, w.Name, 0).Spec
			}
			d.Spec.Replicas = new(int32(w.Spec.Size))
			return ctrl.SetControllerReference(w, d)
		})
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{})
	must(t, err)
	_, err = ctrl.Owns[*appsv1.Deployment](c, ctrl.GenerationChanged)
	must(t, err)
	c2, err := ctrl.NewController(mgr, "app-unfiltered", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		unfiltered.add(ctx, w)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	_, err = ctrl.Owns[*appsv1.Deployment](c2)
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)

	_, err = widgets.Create(ctx, newWidget(ns, "web", 2))
	must(t, err)
	waitIdle(t, mgr)
	key := ctrl.Key{Namespace: ns, Name: "web"}
	d, err := deployments.Uncached().Get(ctx, key)
	must(t, err)
	if d.Generation != 1 || *d.Spec.Replicas != 2 || metav1.GetControllerOf(d) == nil {
		t.Fatalf("got Deployment generation %d, replicas %d, controller %v; want 1, 2, the Widget", d.Generation, *d.Spec.Replicas, metav1.GetControllerOf(d))
	}
	filtered.take()
	unfiltered.take()

	owned := fmt.Sprintf("owned Deployment %s/web", ns)
	steps := []struct {
		name         string
		write        func() error
		wantGen      int64
		wantFiltered []string // causes of the filtered controller's reconciles of web
		wantAll      []string // and of the unfiltered one's
	}{
		{"status", func() error {
			d, err := deployments.Get(ctx, key)
			if err != nil {
				return err
			}
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
			_, err = deployments.UpdateStatus(ctx, d)
			return err
		}, 1, nil, []string{owned}},
		{"labels", func() error {
			_, err := deployments.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`))
			return err
		}, 1, nil, []string{owned}},
		// Scaled behind the Widget's back: generation 2. The controller
		// scales it back (generation 3), and is called once more for its
		// own write, which changes nothing.
		{"spec", func() error {
			_, err := deployments.Patch(ctx, key, types.MergePatchType, []byte(`{"spec":{"replicas":5}}`))
			return err
		}, 3, []string{owned, owned}, []string{owned, owned}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.write())
			waitIdle(t, mgr)
			d, err := deployments.Uncached().Get(ctx, key)
			must(t, err)
			if d.Generation != s.wantGen || *d.Spec.Replicas != 2 {
				t.Errorf("Deployment: got generation %d, replicas %d; want %d, 2", d.Generation, *d.Spec.Replicas, s.wantGen)
			}
			// Causes joined: two events may come in one reconcile or two.
			if got, want := strings.Join(filtered.take()["web"], "; "), strings.Join(s.wantFiltered, "; "); got != want {
				t.Errorf("filtered reconciles: got causes %q, want %q", got, want)
			}
			if got, want := strings.Join(unfiltered.take()["web"], "; "), strings.Join(s.wantAll, "; "); got != want {
				t.Errorf("unfiltered reconciles: got causes %q, want %q", got, want)
			}
		})
	}
	d, err = deployments.Uncached().Get(ctx, key)
	must(t, err)
	if d.Status.ReadyReplicas != 2 || d.Labels["tier"] != "web" {
		t.Errorf("got Deployment status %+v, labels %v; want the test's status and label kept", d.Status, d.Labels)
	}
}

// TestToolkitWatchesFilter maps ConfigMaps to the Widget their label names,
// with a filter that compares the old and the new ConfigMap: only a change
// of data.size or of the label reconciles, a relabeled ConfigMap reconciles
// the Widget it left and the one it joined, each once, and a deletion
// always passes.
func TestToolkitWatchesFilter(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	widgets := newClient[*Widget](t, mgr)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var log causeLog
	c, err := ctrl.NewController(mgr, "sized", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
		log.add(ctx, w)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	cms, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	sizeOrOwner := func(old, cm *corev1.ConfigMap) bool {
		return old.Data["size"] != cm.Data["size"] || old.Labels["widget"] != cm.Labels["widget"]
	}
	must(t, ctrl.Watches(c, cms, func(cm *corev1.ConfigMap) []ctrl.Key {
		if w := cm.Labels["widget"]; w != "" {
			return []ctrl.Key{{Namespace: cm.Namespace, Name: w}}
		}
		return nil
	}, sizeOrOwner))
	ctx := start(t, mgr)
	for _, name := range []string{"a", "b"} {
		_, err := widgets.Create(ctx, newWidget(ns, name, 1))
		must(t, err)
	}
	waitIdle(t, mgr)
	log.take()

	key := ctrl.Key{Namespace: ns, Name: "cfg"}
	mapped := fmt.Sprintf("mapped ConfigMap %s/cfg", ns)
	patch := func(p string) func() error {
		return func() error {
			_, err := configMaps.Patch(ctx, key, types.MergePatchType, []byte(p))
			return err
		}
	}
	steps := []struct {
		name  string
		write func() error
		want  map[string][]string
	}{
		{"created", func() error {
			_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg",
				Labels: map[string]string{"widget": "a"}}, Data: map[string]string{"size": "1"}})
			return err
		}, map[string][]string{"a": {mapped}}},
		{"other data", patch(`{"data":{"comment":"x"}}`), map[string][]string{}},
		{"other label", patch(`{"metadata":{"labels":{"tier":"gold"}}}`), map[string][]string{}},
		{"size", patch(`{"data":{"size":"2"}}`), map[string][]string{"a": {mapped}}},
		{"relabeled", patch(`{"metadata":{"labels":{"widget":"b"}}}`), map[string][]string{"a": {mapped}, "b": {mapped}}},
		{"deleted", func() error { return configMaps.Delete(ctx, key, metav1.DeleteOptions{}) }, map[string][]string{"b": {mapped}}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.write())
			waitIdle(t, mgr)
			if got := log.take(); fmt.Sprint(got) != fmt.Sprint(s.want) {
				t.Errorf("reconciles by Widget: got causes %q, want %q", got, s.want)
			}
		})
	}
}

// fieldsOf returns the fields manager owns in entries, as managedFields
// JSON, over all its operations.
func fieldsOf(entries []metav1.ManagedFieldsEntry, manager string) []string {
	var out []string
	for _, e := range entries {
		if e.Manager == manager && e.FieldsV1 != nil {
			out = append(out, string(e.FieldsV1.Raw))
		}
	}
	return out
}

// TestCreateOrPatchAfterCreate calls CreateOrPatch from a cached client
// when the object was created after its read, as a reconcile may before the
// cache has the child it created a moment ago: the create meets
// AlreadyExists, and CreateOrPatch patches what the server holds, without
// an error.
func TestCreateOrPatchAfterCreate(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	_, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	key := ctrl.Key{Namespace: ns, Name: "child"}
	calls := 0
	cm, op, err := configMaps.CreateOrPatch(ctx, key, func(cm *corev1.ConfigMap) error {
		if calls++; calls == 1 { // between the cache's read and the create
			_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name},
				Data: map[string]string{"theirs": "x"}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data["mine"] = "1"
		return nil
	})
	if err != nil || op != ctrl.Patched || cm.Data["mine"] != "1" || cm.Data["theirs"] != "x" {
		t.Errorf("got %s, data %v, error %v; want patched, mine=1 and theirs=x", op, cm.Data, err)
	}
	live, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, key.Name, metav1.GetOptions{})
	must(t, err)
	if live.Data["mine"] != "1" || live.Data["theirs"] != "x" {
		t.Errorf("on the server: got data %v, want mine=1 and theirs=x", live.Data)
	}
	waitIdle(t, mgr)
}

// TestToolkitCreateOrPatch drives CreateOrPatch from a cached client: it
// creates, then patches only the field its mutate function changed, so a
// field another manager set stays that manager's; it reports an unchanged
// object without any request; and a change made between its read and its
// write is a conflict, not a lost update.
func TestToolkitCreateOrPatch(t *testing.T) {
	ns := newNamespace(t)
	mgr, log := loggedManager(t, ns)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	cache, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	ctx := start(t, mgr)
	waitIdle(t, mgr)
	key := ctrl.Key{Namespace: ns, Name: "settings"}
	setMine := func(v string) func(*corev1.ConfigMap) error {
		return func(cm *corev1.ConfigMap) error {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data["mine"] = v
			return nil
		}
	}
	log.take()

	t.Run("creates", func(t *testing.T) {
		cm, op, err := configMaps.CreateOrPatch(ctx, key, setMine("1"))
		must(t, err)
		requests, _ := log.take()
		if op != ctrl.Created || cm.UID == "" || cm.Data["mine"] != "1" {
			t.Errorf("got %s, uid %q, data %v; want created with mine=1", op, cm.UID, cm.Data)
		}
		// The default field manager is the program's name.
		want := []string{"POST /api/v1/namespaces/" + ns + "/configmaps?fieldManager=" + url.QueryEscape(filepath.Base(os.Args[0]))}
		if !slices.Equal(requests, want) {
			t.Errorf("requests: got %q, want %q (the read is the cache's)", requests, want)
		}
	})

	// Another manager adds its own key; wait for the cache to show it.
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(ctx, key.Name, types.MergePatchType, []byte(`{"data":{"theirs":"x"}}`),
		metav1.PatchOptions{FieldManager: "other"})
	must(t, err)
	eventually(t, 30*time.Second, func() error {
		if cm, _ := cache.Get(key); cm == nil || cm.Data["theirs"] != "x" {
			return fmt.Errorf("the cache does not show the other manager's key yet: %v", cm)
		}
		return nil
	})
	waitIdle(t, mgr)
	log.take()

	t.Run("patches what changed", func(t *testing.T) {
		before, _ := cache.Get(key)
		cm, op, err := configMaps.CreateOrPatch(ctx, key, setMine("2"))
		must(t, err)
		requests, patches := log.take()
		if op != ctrl.Patched || cm.Data["mine"] != "2" || cm.Data["theirs"] != "x" {
			t.Errorf("got %s, data %v; want patched with mine=2 and theirs=x", op, cm.Data)
		}
		want := fmt.Sprintf(`{"data":{"mine":"2"},"metadata":{"resourceVersion":%q}}`, before.ResourceVersion)
		if len(requests) != 1 || !slices.Equal(patches, []string{want}) {
			t.Errorf("got requests %q with patches %q, want one patch %s", requests, patches, want)
		}
		if fs := fieldsOf(cm.ManagedFields, "other"); len(fs) != 1 || !ownsField(fs[0], "f:data.f:theirs") {
			t.Errorf("fields of the other manager: got %v, want f:data.f:theirs still its own", fs)
		}
		if fs := fieldsOf(cm.ManagedFields, filepath.Base(os.Args[0])); len(fs) != 1 || ownsField(fs[0], "f:data.f:theirs") || !ownsField(fs[0], "f:data.f:mine") {
			t.Errorf("fields of ctrl: got %v, want f:data.f:mine and not f:data.f:theirs", fs)
		}
	})
	waitIdle(t, mgr)
	log.take()

	t.Run("unchanged", func(t *testing.T) {
		cm, op, err := configMaps.CreateOrPatch(ctx, key, setMine("2"))
		must(t, err)
		if requests, _ := log.take(); op != ctrl.Unchanged || len(requests) != 0 || cm.Data["mine"] != "2" {
			t.Errorf("got %s with requests %q, data %v; want unchanged, no request", op, requests, cm.Data)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		_, op, err := configMaps.CreateOrPatch(ctx, key, func(cm *corev1.ConfigMap) error {
			// Someone else writes between CreateOrPatch's read and its patch.
			_, err := clientset.CoreV1().ConfigMaps(ns).Patch(ctx, key.Name, types.MergePatchType, []byte(`{"data":{"theirs":"y"}}`),
				metav1.PatchOptions{FieldManager: "other"})
			if err != nil {
				return err
			}
			return setMine("3")(cm)
		})
		if !apierrors.IsConflict(err) || op != ctrl.Unchanged {
			t.Fatalf("got %s, %v; want a conflict", op, err)
		}
		got, err := configMaps.Uncached().Get(ctx, key)
		must(t, err)
		if err := wantData(got, "mine", "2", "theirs", "y"); err != nil {
			t.Errorf("after the conflict: %v; want the other write kept and this one not made", err)
		}
	})

	t.Run("mutate fails", func(t *testing.T) {
		waitIdle(t, mgr)
		log.take()
		_, _, err := configMaps.CreateOrPatch(ctx, ctrl.Key{Namespace: ns, Name: "never"}, func(*corev1.ConfigMap) error {
			return fmt.Errorf("no")
		})
		if requests, _ := log.take(); err == nil || len(requests) != 0 {
			t.Errorf("got %v and requests %q, want the error and no request", err, requests)
		}
	})

	t.Run("uncached", func(t *testing.T) {
		cm, op, err := configMaps.Uncached().CreateOrPatch(ctx, key, setMine("4"))
		must(t, err)
		requests, _ := log.take()
		if op != ctrl.Patched || cm.Data["mine"] != "4" || len(requests) != 2 || !strings.HasPrefix(requests[0], "GET ") {
			t.Errorf("got %s, data %v, requests %q; want patched after a GET from the server", op, cm.Data, requests)
		}
	})
}

// TestToolkitCreateOrPatchStatus writes a Widget's status, which is a
// subresource, with CreateOrPatch: a status change alone is one patch of
// the subresource; a spec and status change is a patch of the object, then
// one of the status against the version the first wrote.
func TestToolkitCreateOrPatchStatus(t *testing.T) {
	ns := newNamespace(t)
	mgr, log := loggedManager(t, ns)
	widgets := newClient[*Widget](t, mgr).Uncached()
	ctx := context.Background() // no cache is read
	key := ctrl.Key{Namespace: ns, Name: "w"}
	set := func(size int, phase string) func(*Widget) error {
		return func(w *Widget) error {
			w.Spec.Size, w.Status.Phase = size, phase
			return nil
		}
	}
	w, op, err := widgets.CreateOrPatch(ctx, key, set(1, "New"))
	must(t, err)
	if op != ctrl.Created || w.Status.Phase != "" {
		t.Errorf("create: got %s, phase %q; want created, and no phase (the server ignores status on create)", op, w.Status.Phase)
	}
	log.take()

	w, op, err = widgets.CreateOrPatch(ctx, key, set(1, "Ready"))
	must(t, err)
	requests, patches := log.take()
	statusPath := "/apis/example.com/v1/namespaces/" + ns + "/widgets/w/status"
	if op != ctrl.StatusPatched || w.Status.Phase != "Ready" || w.Generation != 1 {
		t.Errorf("status only: got %s, phase %q, generation %d; want statusPatched, Ready, 1", op, w.Status.Phase, w.Generation)
	}
	if len(requests) != 2 || !strings.HasPrefix(requests[0], "GET ") || !strings.HasPrefix(requests[1], "PATCH "+statusPath) ||
		len(patches) != 1 || strings.Contains(patches[0], "spec") {
		t.Errorf("status only: got requests %q with patches %q; want a GET, then one status patch", requests, patches)
	}

	before := w.ResourceVersion
	w, op, err = widgets.CreateOrPatch(ctx, key, set(2, "Resizing"))
	must(t, err)
	requests, patches = log.take()
	if op != ctrl.Patched || w.Spec.Size != 2 || w.Status.Phase != "Resizing" || w.Generation != 2 {
		t.Errorf("both: got %s, size %d, phase %q, generation %d; want patched, 2, Resizing, 2", op, w.Spec.Size, w.Status.Phase, w.Generation)
	}
	if len(requests) != 3 || !strings.HasPrefix(requests[2], "PATCH "+statusPath) || len(patches) != 2 ||
		strings.Contains(patches[0], "status") || !strings.Contains(patches[0], before) || strings.Contains(patches[1], before) {
		t.Errorf("both: got requests %q with patches %q; want the object's patch at %s, then the status's at the version it wrote", requests, patches, before)
	}
	got, err := widgets.Get(ctx, key)
	must(t, err)
	if got.Spec.Size != 2 || got.Status.Phase != "Resizing" {
		t.Errorf("on the server: size %d, phase %q; want 2, Resizing", got.Spec.Size, got.Status.Phase)
	}
	log.take()

	_, op, err = widgets.CreateOrPatch(ctx, key, set(2, "Resizing"))
	must(t, err)
	if requests, _ := log.take(); op != ctrl.Unchanged || len(requests) != 1 {
		t.Errorf("unchanged: got %s with requests %q; want unchanged after one GET", op, requests)
	}
}

// TestToolkitPatchFrom changes a copy of a Widget and writes the difference
// with PatchFrom: the patch carries only the changed fields, a removed label
// as null, and the read's resourceVersion, so a write in between is a
// conflict. No change is no request; a status change is ignored, since
// Widgets have a status subresource.
func TestToolkitPatchFrom(t *testing.T) {
	ns := newNamespace(t)
	mgr, log := loggedManager(t, ns)
	widgets := newClient[*Widget](t, mgr).Uncached()
	ctx := context.Background() // no cache is read
	w := newWidget(ns, "w", 1)
	w.Labels = map[string]string{"keep": "1", "drop": "1"}
	old, err := widgets.Create(ctx, w)
	must(t, err)
	log.take()

	changed := old.DeepCopyObject().(*Widget)
	changed.Spec.Size = 2
	delete(changed.Labels, "drop")
	changed.Status.Phase = "Ignored"
	got, err := widgets.PatchFrom(ctx, old, changed)
	must(t, err)
	requests, patches := log.take()
	want := fmt.Sprintf(`{"metadata":{"labels":{"drop":null},"resourceVersion":%q},"spec":{"size":2},"status":{"phase":"Ignored"}}`, old.ResourceVersion)
	if len(requests) != 1 || !slices.Equal(patches, []string{want}) {
		t.Errorf("got requests %q with patches %q, want one patch %s", requests, patches, want)
	}
	if got.Spec.Size != 2 || got.Generation != 2 || fmt.Sprint(got.Labels) != "map[keep:1]" || got.Status.Phase != "" {
		t.Errorf("got size %d, generation %d, labels %v, phase %q; want 2, 2, map[keep:1], and no phase (status is a subresource)",
			got.Spec.Size, got.Generation, got.Labels, got.Status.Phase)
	}

	same, err := widgets.PatchFrom(ctx, got, got.DeepCopyObject().(*Widget))
	must(t, err)
	if requests, _ := log.take(); len(requests) != 0 || same.ResourceVersion != got.ResourceVersion {
		t.Errorf("no change: got requests %q, want none", requests)
	}

	// A write by someone else after got was read.
	_, err = outsideWidgets(t).Patch(ctx, ctrl.KeyOf(got), types.MergePatchType, []byte(`{"metadata":{"labels":{"other":"1"}}}`))
	must(t, err)
	stale := got.DeepCopyObject().(*Widget)
	stale.Spec.Size = 3
	if _, err := widgets.PatchFrom(ctx, got, stale); !apierrors.IsConflict(err) {
		t.Errorf("PatchFrom after a concurrent write: got %v, want a conflict", err)
	}
	now, err := widgets.Get(ctx, ctrl.KeyOf(got))
	must(t, err)
	if now.Spec.Size != 2 || now.Labels["other"] != "1" {
		t.Errorf("after the conflict: got size %d, labels %v; want size 2 and the other label", now.Spec.Size, now.Labels)
	}
}

// onlyWatchesOf returns a transport wrapper that sends the watches of path
// through p and every other request straight to the server: a partition of
// one namespace's watch.
func onlyWatchesOf(path string, p *partition) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		cut := p.wrap(rt)
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == path && r.URL.Query().Get("watch") == "true" {
				return cut.RoundTrip(r)
			}
			return rt.RoundTrip(r)
		})
	}
}

// TestToolkitNamespacesCache runs a controller over a cache of two
// namespaces out of three: it holds exactly their objects, and reads of the
// third are errors. When one namespace's watch breaks, that namespace alone
// catches up: its watch resumes where it was or, if the server answers 410
// Gone, that namespace alone is relisted. The deletion made meanwhile is
// found, and the other namespace's objects are neither removed nor
// reconciled again.
func TestToolkitNamespacesCache(t *testing.T) {
	a, b, other := newNamespace(t), newNamespace(t), newNamespace(t)
	ctx := context.Background()
	create := func(ns, name string) {
		t.Helper()
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(t, err)
	}
	create(a, "one")
	create(a, "two")
	create(b, "one")
	create(other, "one")

	p := &partition{}
	cfg := env.Config()
	cfg.Wrap(onlyWatchesOf("/api/v1/namespaces/"+a+"/configmaps", p))
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg})
	must(t, err)
	var (
		mu         sync.Mutex
		reconciled = map[string]int{}
		deleted    []string
	)
	c, err := ctrl.NewController(mgr, "two-namespaces", func(_ context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		reconciled[ctrl.KeyOf(cm).String()]++
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Namespaces: []string{a, b}}})
	must(t, err)
	must(t, c.OnDelete(func(_ context.Context, cm *corev1.ConfigMap) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, ctrl.KeyOf(cm).String())
		return nil
	}))
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	start(t, mgr)
	waitIdle(t, mgr)
	snapshot := func() (map[string]int, []string) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(reconciled), slices.Clone(deleted)
	}
	cached := func() []string { return keys(c.Cache().List("", nil)) }
	sorted := func(keys ...string) []string { slices.Sort(keys); return keys }

	want := sorted(a+"/one", a+"/two", b+"/one")
	if got := cached(); !slices.Equal(got, want) {
		t.Errorf("cached: got %v, want %v", got, want)
	}
	if got, _ := snapshot(); fmt.Sprint(got) != fmt.Sprint(map[string]int{a + "/one": 1, a + "/two": 1, b + "/one": 1}) {
		t.Errorf("reconciled: got %v, want each object of the two namespaces once", got)
	}
	if list, err := configMaps.List(ctx, ctrl.ListParams{Namespace: b}); err != nil || !slices.Equal(keys(list), []string{b + "/one"}) {
		t.Errorf("List of namespace %s: got %v, %v; want its one object", b, keys(list), err)
	}
	for _, read := range []func() error{
		func() error { _, err := configMaps.Get(ctx, ctrl.Key{Namespace: other, Name: "one"}); return err },
		func() error { _, err := configMaps.List(ctx, ctrl.ListParams{Namespace: other}); return err },
		func() error { _, err := configMaps.List(ctx, ctrl.ListParams{}); return err },
	} {
		if err := read(); err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "no cache") {
			t.Errorf("read outside the cache's namespaces: got %v, want an error that names the missing cache", err)
		}
	}
	// Writes through the manager's client: WaitIdle waits for the one the
	// cache will see, and not for the one it never will.
	for _, ns := range []string{b, other} {
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two"}})
		must(t, err)
	}
	waitIdle(t, mgr)
	want = sorted(a+"/one", a+"/two", b+"/one", b+"/two")
	if got := cached(); !slices.Equal(got, want) {
		t.Errorf("cached after creates in %s and %s: got %v, want %v", b, other, got, want)
	}

	// Cut namespace a's watch and change both namespaces behind the
	// manager's back.
	p.setCut(true)
	must(t, clientset.CoreV1().ConfigMaps(a).Delete(ctx, "two", metav1.DeleteOptions{}))
	create(a, "three")
	create(b, "three")
	eventually(t, 30*time.Second, func() error { // b's watch goes on
		if _, ok := c.Cache().Get(ctrl.Key{Namespace: b, Name: "three"}); !ok {
			return fmt.Errorf("%s/three is not cached while %s's watch is cut", b, a)
		}
		return nil
	})
	if got := cached(); !slices.Contains(got, a+"/two") || slices.Contains(got, a+"/three") {
		t.Fatalf("cached while %s's watch is cut: got %v, want its old objects", a, got)
	}
	waitIdle(t, mgr)
	before, _ := snapshot()
	p.setCut(false)
	want = sorted(a+"/one", a+"/three", b+"/one", b+"/three", b+"/two")
	eventually(t, time.Minute, func() error {
		if got := cached(); !slices.Equal(got, want) {
			return fmt.Errorf("cached after %s relisted: got %v, want %v", a, got, want)
		}
		return nil
	})
	waitIdle(t, mgr)
	after, gone := snapshot()
	if !slices.Equal(gone, []string{a + "/two"}) {
		t.Errorf("OnDelete: got %v, want [%s/two]", gone, a)
	}
	for k, n := range after {
		if strings.HasPrefix(k, b+"/") && n != before[k] {
			t.Errorf("%s reconciled %d times after %s relisted, want %d: the relist of one namespace touches only its own objects", k, n, a, before[k])
		}
	}
	if after[a+"/three"] != 1 {
		t.Errorf("%s/three reconciled %d times, want once, from the relist", a, after[a+"/three"])
	}
	expired, requests := p.log()
	t.Logf("%s's watch requests after the cut: %v; answered 410 Gone: %v", a, requests, expired)
	relistsA := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"resource": "configmaps", "namespace": a})
	relistsB := metricValue(t, mgr, "ctrl_cache_relists_total", map[string]string{"resource": "configmaps", "namespace": b})
	// A resume the server still serves needs no list; one it answers 410
	// Gone (the history is compacted, or gone from its watch cache) does.
	if len(expired) > 0 && relistsA < 1 || relistsB != 0 {
		t.Errorf("ctrl_cache_relists_total: got %v in %s (%d watches answered 410 Gone) and %v in %s, want at least 1 after a 410 and 0",
			relistsA, a, len(expired), relistsB, b)
	}
}

// widgetResource reads the Widget's CustomResourceDefinition at run time,
// through a client of *unstructured.Unstructured, and returns where its
// first version is served.
func widgetResource(t *testing.T, mgr *ctrl.Manager) ctrl.APIResource {
	t.Helper()
	crds, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: ctrl.APIResource{
		Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions", Kind: "CustomResourceDefinition",
	}})
	must(t, err)
	crd, err := crds.Uncached().Get(context.Background(), ctrl.Key{Name: "widgets.example.com"})
	must(t, err)
	spec := crd.Object["spec"].(map[string]any)
	names := spec["names"].(map[string]any)
	version := spec["versions"].([]any)[0].(map[string]any)
	_, status, _ := unstructured.NestedMap(version, "subresources", "status")
	return ctrl.APIResource{
		Group:      spec["group"].(string),
		Version:    version["name"].(string),
		Resource:   names["plural"].(string),
		Kind:       names["kind"].(string),
		Namespaced: spec["scope"] == "Namespaced",
		Status:     status,
	}
}

// TestToolkitUnstructured runs a controller of *unstructured.Unstructured
// over the Widget resource, found at run time from its
// CustomResourceDefinition: it copies spec.size into status.observedSize
// through the status subresource, and the typed view of the same objects
// agrees. Each Widget controls a ConfigMap, which Owns maps back to it: a
// deleted ConfigMap comes back.
func TestToolkitUnstructured(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	res := widgetResource(t, mgr)
	if want := (ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Status: true}); !reflect.DeepEqual(res, want) {
		t.Fatalf("resource from the CRD: got %+v, want %+v", res, want)
	}
	objects, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: res})
	must(t, err)
	configMaps := newClient[*corev1.ConfigMap](t, mgr)
	var reconciles atomic.Int32
	c, err := ctrl.NewController(mgr, "observe-size", func(ctx context.Context, u *unstructured.Unstructured) (ctrl.Result, error) {
		reconciles.Add(1)
		_, _, err := configMaps.CreateOrPatch(ctx, ctrl.Key{Namespace: u.GetNamespace(), Name: u.GetName() + "-child"}, func(cm *corev1.ConfigMap) error {
			return ctrl.SetControllerReference(u, cm)
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		if observed, found, _ := unstructured.NestedInt64(u.Object, "status", "observedSize"); found && observed == size {
			return ctrl.Result{}, nil
		}
		u = u.DeepCopy()
		if err := unstructured.SetNestedField(u.Object, size, "status", "observedSize"); err != nil {
			return ctrl.Result{}, ctrl.Terminal(err)
		}
		_, err = objects.UpdateStatus(ctx, u)
		return ctrl.Result{}, err
	}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{Resource: res}})
	must(t, err)
	_, err = ctrl.Owns[*corev1.ConfigMap](c)
	must(t, err)
	ctx := start(t, mgr)
	typed := outsideWidgets(t)

	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName("w")
	must(t, unstructured.SetNestedField(u.Object, int64(3), "spec", "size"))
	created, err := objects.Create(ctx, u)
	must(t, err)
	waitIdle(t, mgr)
	w, err := typed.Get(ctx, ctrl.KeyOf(created))
	must(t, err)
	if w.Spec.Size != 3 || w.Status.ObservedSize != 3 || w.UID != created.GetUID() {
		t.Errorf("got Widget size %d, observed %d; want 3, 3", w.Spec.Size, w.Status.ObservedSize)
	}
	child := func() (*corev1.ConfigMap, error) {
		return clientset.CoreV1().ConfigMaps(ns).Get(ctx, "w-child", metav1.GetOptions{})
	}
	cm, err := child()
	must(t, err)
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.APIVersion != "example.com/v1" || ref.Kind != "Widget" || ref.UID != created.GetUID() {
		t.Errorf("controller of the child: got %+v, want Widget w with uid %s", ref, created.GetUID())
	}
	must(t, clientset.CoreV1().ConfigMaps(ns).Delete(ctx, "w-child", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() error { // someone else's deletion: WaitIdle does not know of it
		got, err := child()
		if err == nil && got.UID == cm.UID {
			return errors.New("the child is still the deleted one")
		}
		return err
	})

	_, err = objects.Patch(ctx, ctrl.KeyOf(created), types.MergePatchType, []byte(`{"spec":{"size":4}}`))
	must(t, err)
	waitIdle(t, mgr)
	w, err = typed.Get(ctx, ctrl.KeyOf(created))
	must(t, err)
	if w.Spec.Size != 4 || w.Status.ObservedSize != 4 || w.Generation != 2 {
		t.Errorf("got Widget size %d, observed %d, generation %d; want 4, 4, 2", w.Spec.Size, w.Status.ObservedSize, w.Generation)
	}
	cached := c.Cache().List(ns, nil)
	if len(cached) != 1 || cached[0].GetKind() != "Widget" || cached[0].GetAPIVersion() != "example.com/v1" {
		t.Errorf("cached: got %v, want the one Widget with its kind and apiVersion", cached)
	}
	got, err := objects.Get(ctx, ctrl.KeyOf(created))
	must(t, err)
	if observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedSize"); observed != 4 {
		t.Errorf("cached read: got observedSize %d, want 4", observed)
	}

	must(t, objects.Delete(ctx, ctrl.KeyOf(created), metav1.DeleteOptions{}))
	waitIdle(t, mgr)
	if _, err := typed.Get(ctx, ctrl.KeyOf(created)); !apierrors.IsNotFound(err) {
		t.Errorf("after Delete: got %v, want NotFound", err)
	}
	t.Logf("%d reconciles", reconciles.Load())
}

// TestToolkitListPages lists more objects than a page holds, live, for a
// built-in type (protobuf), a custom resource (JSON) and an unstructured
// one (the dynamic client): the list takes a request per page, each after
// the first with the continue token of the one before, and returns every
// object once.
func TestToolkitListPages(t *testing.T) {
	ns := newNamespace(t)
	mgr, log := loggedManager(t, ns)
	ctx := context.Background() // uncached reads: the manager need not run
	for i := range 25 {
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{})
		must(t, err)
	}
	outside := outsideWidgets(t)
	for i := range 12 {
		_, err := outside.Create(ctx, newWidget(ns, fmt.Sprintf("w-%02d", i), i))
		must(t, err)
	}
	configMaps := newClient[*corev1.ConfigMap](t, mgr).Uncached()
	widgets := newClient[*Widget](t, mgr).Uncached()
	objects, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: widgetResource(t, mgr)})
	must(t, err)
	objects = objects.Uncached()
	log.take()

	tests := []struct {
		name  string
		path  string
		limit int64
		list  func(ctrl.ListParams) ([]string, error)
		n     int
	}{
		{"ConfigMap", "/api/v1/namespaces/" + ns + "/configmaps", 10, func(o ctrl.ListParams) ([]string, error) {
			l, err := configMaps.List(ctx, o)
			return keys(l), err
		}, 25},
		{"Widget", "/apis/example.com/v1/namespaces/" + ns + "/widgets", 5, func(o ctrl.ListParams) ([]string, error) {
			l, err := widgets.List(ctx, o)
			return keys(l), err
		}, 12},
		{"unstructured Widget", "/apis/example.com/v1/namespaces/" + ns + "/widgets", 5, func(o ctrl.ListParams) ([]string, error) {
			l, err := objects.List(ctx, o)
			return keys(l), err
		}, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, limit := range []int64{tt.limit, 0} {
				got, err := tt.list(ctrl.ListParams{Limit: limit})
				must(t, err)
				requests, _ := log.take()
				pages := 1
				if limit > 0 {
					pages = (tt.n + int(limit) - 1) / int(limit)
				}
				if len(got) != tt.n || len(slices.Compact(got)) != tt.n {
					t.Errorf("limit %d: got %d objects (%d distinct), want %d", limit, len(got), len(slices.Compact(got)), tt.n)
				}
				if len(requests) != pages {
					t.Errorf("limit %d: got requests %q, want %d", limit, requests, pages)
				}
				for i, r := range requests {
					if !strings.HasPrefix(r, "GET "+tt.path) || strings.Contains(r, "continue=") != (i > 0) ||
						limit > 0 && !strings.Contains(r, fmt.Sprintf("limit=%d", limit)) {
						t.Errorf("limit %d: request %d is %q, want a GET of %s with the limit, and a continue token after the first", limit, i, r, tt.path)
					}
				}
			}
		})
	}
}

// TestToolkitFieldSelectors lists Secrets by their type and name, live and
// from a cache, which evaluates the selector by field path: both give the
// server's answer. A cache with a field selector holds only what it
// selects.
func TestToolkitFieldSelectors(t *testing.T) {
	ns := newNamespace(t)
	mgr := newManager(t, ns)
	secrets := newClient[*corev1.Secret](t, mgr)
	_, err := ctrl.NewCache[*corev1.Secret](mgr, ctrl.CacheOptions{})
	must(t, err)
	const basicAuth = string(corev1.SecretTypeBasicAuth)
	auth, err := ctrl.NewCache[*corev1.Secret](mgr, ctrl.CacheOptions{FieldSelector: fields.OneTermEqualSelector("type", basicAuth)})
	must(t, err)
	ctx := start(t, mgr)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain-1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain-2"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-1"}, Type: corev1.SecretTypeBasicAuth,
			StringData: map[string]string{"username": "u"}},
	} {
		_, err := secrets.Create(ctx, s)
		must(t, err)
	}
	waitIdle(t, mgr)

	tests := []struct {
		selector string
		want     []string
	}{
		{"type=" + basicAuth, []string{"auth-1"}},
		{"type!=" + basicAuth, []string{"plain-1", "plain-2"}},
		{"type=Opaque", []string{"plain-1", "plain-2"}},
		{"metadata.name=plain-2", []string{"plain-2"}},
		{"type=" + basicAuth + ",metadata.name=plain-1", nil},
	}
	names := func(ss []*corev1.Secret) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		slices.Sort(out)
		return out
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			sel, err := fields.ParseSelector(tt.selector)
			must(t, err)
			live, err := secrets.Uncached().List(ctx, ctrl.ListParams{FieldSelector: sel})
			must(t, err)
			cached, err := secrets.List(ctx, ctrl.ListParams{FieldSelector: sel})
			must(t, err)
			if got := names(live); !slices.Equal(got, tt.want) {
				t.Errorf("live: got %v, want %v", got, tt.want)
			}
			if got := names(cached); !slices.Equal(got, tt.want) {
				t.Errorf("cached: got %v, want %v", got, tt.want)
			}
		})
	}
	if got := names(auth.List("", nil)); !slices.Equal(got, []string{"auth-1"}) {
		t.Errorf("the cache of basic-auth Secrets holds %v, want [auth-1]", got)
	}
}

// Sprocket is a custom resource whose CustomResourceDefinition has no status
// subresource, registered without APIResource.Status.
type Sprocket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SprocketSpec   `json:"spec"`
	Status            SprocketStatus `json:"status,omitzero"`
}

// SprocketSpec is what the user asks for.
type SprocketSpec struct {
	Teeth int `json:"teeth"`
}

// SprocketStatus is written with the rest of the object.
type SprocketStatus struct {
	State string `json:"state,omitempty"`
}

func (s *Sprocket) DeepCopyObject() runtime.Object {
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	if err := ctrl.Register[*Sprocket](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "sprockets", Namespaced: true}); err != nil {
		panic(err)
	}
}

const sprocketCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Sprocket
    listKind: SprocketList
    plural: sprockets
    singular: sprocket
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              teeth:
                type: integer
          status:
            type: object
            properties:
              state:
                type: string
`

// TestToolkitNoStatusSubresource installs a CRD without a status
// subresource: every status write through a client of a type registered
// without Status fails with an error that says what to do, and makes no
// request, where the server would answer 404; the status is written with
// the object instead.
func TestToolkitNoStatusSubresource(t *testing.T) {
	must(t, env.InstallCRDs([]byte(sprocketCRD)))
	ns := newNamespace(t)
	mgr, log := loggedManager(t, ns)
	ctx := context.Background()
	sprockets := newClient[*Sprocket](t, mgr)
	s, err := sprockets.Create(ctx, &Sprocket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Spec: SprocketSpec{Teeth: 12}})
	must(t, err)
	untyped, err := ctrl.NewClient[*unstructured.Unstructured](mgr, ctrl.ClientOptions{Resource: ctrl.APIResource{
		Group: "example.com", Version: "v1", Resource: "sprockets", Kind: "Sprocket", Namespaced: true}})
	must(t, err)
	log.take()

	s.Status.State = "ok"
	key := ctrl.KeyOf(s)
	statusPatch := []byte(`{"status":{"state":"ok"}}`)
	writes := map[string]func() error{
		"UpdateStatus": func() error { _, err := sprockets.UpdateStatus(ctx, s); return err },
		"PatchStatus":  func() error { _, err := sprockets.PatchStatus(ctx, key, types.MergePatchType, statusPatch); return err },
		"Apply status": func() error {
			_, err := sprockets.Apply(ctx, s, ctrl.ApplyParams{Status: true, FieldManager: "test"})
			return err
		},
		"unstructured PatchStatus": func() error {
			_, err := untyped.PatchStatus(ctx, key, types.MergePatchType, statusPatch)
			return err
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			err := write()
			if err == nil || !strings.Contains(err.Error(), "the resource has no status subresource: its CustomResourceDefinition has no `subresources: {status: {}}`") {
				t.Errorf("got %v, want the error that says the resource has no status subresource", err)
			}
			if requests, _ := log.take(); len(requests) != 0 {
				t.Errorf("requests: got %q, want none", requests)
			}
		})
	}

	// What the error spares the user: the server has no such subresource.
	err = clientset.Discovery().RESTClient().Put().
		AbsPath("/apis/example.com/v1/namespaces", ns, "sprockets", "s", "status").
		Body([]byte(`{"apiVersion":"example.com/v1","kind":"Sprocket","metadata":{"name":"s"}}`)).
		SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if !apierrors.IsNotFound(err) {
		t.Errorf("PUT of the status subresource: got %v, want 404 Not Found", err)
	}
	// The status is part of the object: Update writes it.
	updated, err := sprockets.Update(ctx, s)
	must(t, err)
	got, err := sprockets.Uncached().Get(ctx, key)
	must(t, err)
	if updated.Status.State != "ok" || got.Status.State != "ok" || got.Spec.Teeth != 12 {
		t.Errorf("after Update: got status %+v, teeth %d; want state ok, 12 teeth", got.Status, got.Spec.Teeth)
	}
}

// heldList holds back a cache's first streamed list (a watch with
// sendInitialEvents) at path: the server has answered, but the manager reads
// nothing until release is closed, and then nothing past the bookmark that
// ends the initial events for another 2 seconds, as a slow network would.
// Watch events are JSON lines here: Widgets travel as JSON.
type heldList struct {
	path    string
	release chan struct{}
	held    atomic.Bool
}

func (h *heldList) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil || r.URL.Path != h.path || r.URL.Query().Get("sendInitialEvents") != "true" || !h.held.CompareAndSwap(false, true) {
			return resp, err
		}
		resp.Body = &heldBody{ReadCloser: resp.Body, release: h.release, closed: make(chan struct{})}
		return resp, nil
	})
}

type heldBody struct {
	io.ReadCloser
	release   <-chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	pending   []byte // read from the server, not yet passed on
	ended     bool   // the initial events' bookmark was passed on
	waited    bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	select {
	case <-b.release:
	case <-b.closed:
		return 0, io.EOF
	}
	if b.ended && !b.waited {
		b.waited = true
		t := time.NewTimer(2 * time.Second) // the slow network being simulated
		select {
		case <-t.C:
		case <-b.closed:
			t.Stop()
			return 0, io.EOF
		}
	}
	if len(b.pending) == 0 {
		buf := make([]byte, 32*1024)
		n, err := b.ReadCloser.Read(buf)
		if n == 0 {
			return 0, err
		}
		b.pending = buf[:n]
	}
	end := len(b.pending)
	if !b.ended {
		if i := bytes.Index(b.pending, []byte(metav1.InitialEventsAnnotationKey)); i >= 0 {
			if j := bytes.IndexByte(b.pending[i:], '\n'); j >= 0 {
				end, b.ended = i+j+1, true
			}
		}
	}
	n := copy(p, b.pending[:end])
	b.pending = b.pending[n:]
	return n, nil
}

func (b *heldBody) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// TestToolkitWaitIdleBeforeFirstList writes through a client while the
// cache of its type is still receiving its first list, and that list was
// taken before the write: WaitIdle must wait for the write's own event,
// which comes after the list, and not take the cache's empty position for
// one past the write.
func TestToolkitWaitIdleBeforeFirstList(t *testing.T) {
	ns := newNamespace(t)
	h := &heldList{path: "/apis/example.com/v1/namespaces/" + ns + "/widgets", release: make(chan struct{})}
	cfg := env.Config()
	cfg.Wrap(h.wrap)
	mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns})
	must(t, err)
	widgets := newClient[*Widget](t, mgr)
	var reconciled atomic.Int32
	_, err = ctrl.NewController(mgr, "counter", func(context.Context, *Widget) (ctrl.Result, error) {
		reconciled.Add(1)
		return ctrl.Result{}, nil
	}, ctrl.ControllerOptions{})
	must(t, err)
	ctx := start(t, mgr)
	eventually(t, 30*time.Second, func() error {
		if !h.held.Load() {
			return errors.New("the cache has not asked for its list yet")
		}
		return nil
	})
	_, err = widgets.Create(ctx, newWidget(ns, "w", 1))
	must(t, err)
	close(h.release)
	waitIdle(t, mgr)
	if got := reconciled.Load(); got != 1 {
		t.Errorf("got %d reconciles when WaitIdle returned, want 1: the Widget created before the cache's first list arrived", got)
	}
}
