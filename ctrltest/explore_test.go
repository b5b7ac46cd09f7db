package ctrltest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
)

// Four controllers, each with a bug of one of the kinds Sieve (OSDI '22)
// found in real controllers, and each with the bug fixed: Search finds the
// bug with a plan of its kind and the fixed controller passes every plan.
//
//   - retire (intermediate state): a Job ConfigMap with retire=true has its
//     child deleted, then its phase set to Retired. The buggy controller
//     fails on the child's NotFound, so a crash between the deletion and
//     the phase leaves it failing for ever (the search tells so as soon as
//     the retries fail the same way with nothing changing, not once
//     Settle has passed); fixed, it ignores NotFound.
//   - sweep (stale view): a Secret whose parent ConfigMap is not in the
//     cache is deleted as an orphan (the Secrets' cache selects those with
//     a parent; the end state compared is the named Objects). With the ConfigMaps' view stale the
//     parent is missing and a live Secret goes; fixed, it confirms the
//     parent is gone with a read from the server before deleting.
//   - collect (time travel): a snapshot Secret, made by the controller for
//     a Backup ConfigMap, is deleted by a garbage collector when its
//     Backup is not in the cache. The workload writes only the Backup, so
//     no stale view of ConfigMaps reaches a snapshot; after a crash, a
//     manager served an older state of ConfigMaps (a lagging API server)
//     collects the live snapshot, and the Backup, which records that it
//     took one, never takes another. Fixed, the collector confirms with a
//     read from the server.
//   - tally (unobserved state): a Task ConfigMap is counted, in a record
//     ConfigMap, when it leaves "pending". The buggy controller reacts only
//     to the update from pending to running; when that event is coalesced
//     into the next (pending to done) the Task is never counted. Fixed, it
//     reconciles every change and acts on the state it reads.
func TestSearchFindsBugs(t *testing.T) {
	env := ctrltest.Start(t, ctrltest.Options{})
	// After every search, before the control plane stops: each run
	// stopped its managers.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(before, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")); err != nil {
			t.Errorf("goroutines left running after the searches: %v", err)
		}
	})
	for _, c := range []struct {
		name     string
		x        func(fixed bool) ctrltest.Exploration
		wantPlan string // a prefix of the plan that finds the bug
		wantDiff string
	}{
		{"retire", retire, "crash-after-delete-configmaps-job-child-1", ""},
		{"sweep", sweep, "stale-configmaps-step-0", "secrets/child: exists in the reference, not here"},
		{"tally", tally, "unobserved-configmaps-task-2", "configmaps/task-record: exists in the reference, not here"},
		{"collect", collect, "timetravel-configmaps-step-1", "secrets/db-snapshot: exists in the reference, not here"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var found *ctrltest.Finding
			findings := ctrltest.Search(t, env, c.x(false))
			for i, f := range findings {
				t.Logf("buggy: %s", f.Plan)
				if f.Plan == c.wantPlan {
					found = &findings[i]
				}
			}
			switch {
			case found == nil:
				t.Errorf("buggy %s: no finding of plan %s among %d", c.name, c.wantPlan, len(findings))
			case c.wantDiff != "" && !strings.Contains(strings.Join(found.Diff, "\n"), c.wantDiff):
				t.Errorf("buggy %s: finding\n%s\nwant the difference %q", c.name, found, c.wantDiff)
			case c.wantDiff == "" && (found.Err == nil || !strings.Contains(found.Err.Error(), "its retries cannot succeed")):
				// Known as soon as the retries fail the same way with
				// nothing changing, not once Settle has passed.
				t.Errorf("buggy %s: finding\n%s\nwant it not to settle, its retries failing the same way", c.name, found)
			case len(found.Trace) == 0 || found.Injected == "":
				t.Errorf("buggy %s: finding\n%s\nwant what was injected and the trace around it", c.name, found)
			default:
				t.Logf("buggy %s:\n%s", c.name, found)
			}
			for _, f := range ctrltest.Search(t, env, c.x(true)) {
				t.Errorf("fixed %s: %s", c.name, f)
			}
		})
	}
}

const settle = 15 * time.Second

func configMaps(w *ctrltest.Workload) *ctrl.Client[*corev1.ConfigMap] {
	c, err := ctrltest.ClientFor[*corev1.ConfigMap](w)
	if err != nil {
		panic(err)
	}
	return c
}

func mergePatch(data map[string]string) []byte {
	var b strings.Builder
	b.WriteString(`{"data":{`)
	i := 0
	for k, v := range data {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:%q", k, v)
		i++
	}
	b.WriteString("}}")
	return []byte(b.String())
}

func retire(fixed bool) ctrltest.Exploration {
	return ctrltest.Exploration{
		Settle: settle,
		Setup: func(mgr *ctrl.Manager) error {
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			_, err = ctrl.NewController(mgr, "retire", func(ctx context.Context, job *corev1.ConfigMap) (ctrl.Result, error) {
				if job.Labels["role"] != "job" {
					return ctrl.Result{}, nil
				}
				child := ctrl.Key{Namespace: job.Namespace, Name: job.Name + "-child"}
				setPhase := func(phase string) error {
					if job.Data["phase"] == phase {
						return nil
					}
					_, err := cms.Patch(ctx, ctrl.KeyOf(job), types.MergePatchType, mergePatch(map[string]string{"phase": phase}))
					return err
				}
				if job.Data["retire"] == "true" {
					if job.Data["phase"] == "Retired" {
						return ctrl.Result{}, nil
					}
					err := cms.Delete(ctx, child)
					if fixed {
						err = ctrl.IgnoreNotFound(err)
					}
					if err != nil {
						return ctrl.Result{}, err
					}
					return ctrl.Result{}, setPhase("Retired")
				}
				if _, err := cms.Get(ctx, child); apierrors.IsNotFound(err) {
					if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: child.Namespace, Name: child.Name}}); err != nil && !apierrors.IsAlreadyExists(err) {
						return ctrl.Result{}, err
					}
				} else if err != nil {
					return ctrl.Result{}, err
				}
				return ctrl.Result{}, setPhase("Active")
			}, ctrl.ControllerOptions{})
			return err
		},
		Workload: func(w *ctrltest.Workload) error {
			cms := configMaps(w)
			ctx := w.Context()
			job := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "job", Labels: map[string]string{"role": "job"}}}
			if _, err := cms.Create(ctx, job); err != nil {
				return err
			}
			if err := w.Settle(); err != nil {
				return err
			}
			_, err := cms.Patch(ctx, ctrl.KeyOf(job), types.MergePatchType, mergePatch(map[string]string{"retire": "true"}))
			return err
		},
	}
}

func sweep(fixed bool) ctrltest.Exploration {
	return ctrltest.Exploration{
		Settle: settle,
		Setup: func(mgr *ctrl.Manager) error {
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			if _, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{}); err != nil {
				return err
			}
			secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			_, err = ctrl.NewController(mgr, "sweep", func(ctx context.Context, s *corev1.Secret) (ctrl.Result, error) {
				parent := s.Labels["parent"]
				if parent == "" {
					return ctrl.Result{}, nil
				}
				key := ctrl.Key{Namespace: s.Namespace, Name: parent}
				_, err := cms.Get(ctx, key)
				if fixed && apierrors.IsNotFound(err) {
					// The cache may lag: confirm with the server.
					_, err = cms.Uncached().Get(ctx, key)
				}
				if !apierrors.IsNotFound(err) {
					return ctrl.Result{}, err
				}
				return ctrl.Result{}, ctrl.IgnoreNotFound(secrets.Delete(ctx, ctrl.KeyOf(s)))
			}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: hasParent}})
			return err
		},
		Workload: func(w *ctrltest.Workload) error {
			cms := configMaps(w)
			secrets, err := ctrltest.ClientFor[*corev1.Secret](w)
			if err != nil {
				return err
			}
			ctx := w.Context()
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "parent"}}); err != nil {
				return err
			}
			if err := w.Settle(); err != nil {
				return err
			}
			if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "child", Labels: map[string]string{"parent": "parent"}}}); err != nil {
				return err
			}
			// The last write is outside the Secrets cache's selector:
			// settling does not wait for the cache to see it.
			_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "unrelated"}})
			return err
		},
		Objects: []ctrltest.ObjectRef{
			{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Name: "parent"},
			{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Name: "child"},
		},
	}
}

// hasParent selects the Secrets that name a parent.
var hasParent = func() labels.Selector {
	sel, err := labels.Parse("parent")
	if err != nil {
		panic(err)
	}
	return sel
}()

func tally(fixed bool) ctrltest.Exploration {
	return ctrltest.Exploration{
		Settle: settle,
		Setup: func(mgr *ctrl.Manager) error {
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			c, err := ctrl.NewController(mgr, "tally", func(ctx context.Context, task *corev1.ConfigMap) (ctrl.Result, error) {
				if task.Labels["role"] != "task" || task.Data["state"] == "pending" {
					return ctrl.Result{}, nil
				}
				record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: task.Name + "-record"},
					Data: map[string]string{"started": "true"}}
				if fixed {
					if _, err := cms.Get(ctx, ctrl.KeyOf(record)); !apierrors.IsNotFound(err) {
						return ctrl.Result{}, err
					}
				}
				_, err := cms.Create(ctx, record)
				return ctrl.Result{}, err
			}, ctrl.ControllerOptions{})
			if err != nil || fixed {
				return err
			}
			// The bug: act only on the transition from pending to running.
			return c.FilterUpdates(func(old, obj *corev1.ConfigMap) bool {
				return old.Data["state"] == "pending" && obj.Data["state"] == "running"
			})
		},
		Workload: func(w *ctrltest.Workload) error {
			cms := configMaps(w)
			ctx := w.Context()
			task := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "task", Labels: map[string]string{"role": "task"}},
				Data: map[string]string{"state": "pending"}}
			if _, err := cms.Create(ctx, task); err != nil {
				return err
			}
			if err := w.Settle(); err != nil {
				return err
			}
			for _, state := range []string{"running", "done"} {
				if _, err := cms.Patch(ctx, ctrl.KeyOf(task), types.MergePatchType, mergePatch(map[string]string{"state": state})); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func collect(fixed bool) ctrltest.Exploration {
	return ctrltest.Exploration{
		Settle: settle,
		Setup: func(mgr *ctrl.Manager) error {
			cms, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			secrets, err := ctrl.NewClient[*corev1.Secret](mgr, ctrl.ClientOptions{})
			if err != nil {
				return err
			}
			// The Backup takes one snapshot, and records that it did.
			_, err = ctrl.NewController(mgr, "backup", func(ctx context.Context, b *corev1.ConfigMap) (ctrl.Result, error) {
				if b.Labels["role"] != "backup" || b.Data["snapshot"] == "taken" {
					return ctrl.Result{}, nil
				}
				snap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name + "-snapshot", Labels: map[string]string{"parent": b.Name}}}
				if _, err := secrets.Create(ctx, snap); err != nil && !apierrors.IsAlreadyExists(err) {
					return ctrl.Result{}, err
				}
				_, err := cms.Patch(ctx, ctrl.KeyOf(b), types.MergePatchType, mergePatch(map[string]string{"snapshot": "taken"}))
				return ctrl.Result{}, err
			}, ctrl.ControllerOptions{})
			if err != nil {
				return err
			}
			_, err = ctrl.NewController(mgr, "collect", func(ctx context.Context, s *corev1.Secret) (ctrl.Result, error) {
				key := ctrl.Key{Namespace: s.Namespace, Name: s.Labels["parent"]}
				_, err := cms.Get(ctx, key)
				if fixed && apierrors.IsNotFound(err) {
					// The cache may lag, even behind what it held before.
					_, err = cms.Uncached().Get(ctx, key)
				}
				if !apierrors.IsNotFound(err) {
					return ctrl.Result{}, err
				}
				return ctrl.Result{}, ctrl.IgnoreNotFound(secrets.Delete(ctx, ctrl.KeyOf(s)))
			}, ctrl.ControllerOptions{Cache: ctrl.CacheOptions{LabelSelector: hasParent}})
			return err
		},
		Workload: func(w *ctrltest.Workload) error {
			b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "db", Labels: map[string]string{"role": "backup"}}}
			if _, err := configMaps(w).Create(w.Context(), b); err != nil {
				return err
			}
			return w.Settle()
		},
	}
}
