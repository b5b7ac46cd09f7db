package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/typedctrl/ctrl"
)

// TestRBAC runs a manager as a ServiceAccount of its own, on the suite's
// API server with RBAC on, under exactly the rules Manager.RBACRules
// returns plus the controllers' own writes: a ConfigMap labeler, and a
// Widget controller with a finalizer, status writes, Events and leader
// election. With every rule both reconcile and nothing is reported. Without
// the list, or the watch, of Widgets, the refusal is reported within five
// seconds, in /readyz (failing it for the watch) and in one log line, with
// the rule to add, while the ConfigMap labeler goes on reconciling.
func TestRBAC(t *testing.T) {
	ownWrites := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"example.com"}, Resources: []string{"widgets/status"}, Verbs: []string{"update"}},
	}
	for _, tt := range []struct {
		name    string
		missing string // a verb taken from the rule of widgets
		// The readiness it leaves: the cache lists by watching (client-go's
		// streaming lists), so it syncs without the list permission, which
		// it needs the day it must fall back to listing.
		readyz int
	}{
		{"least rules", "", http.StatusOK},
		{"no list", "list", http.StatusOK},
		{"no watch", "watch", http.StatusServiceUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			cfg := tokenConfig(serviceAccount(t, ns, "controller"))
			var log logLines
			mgr, err := ctrl.NewManager(ctrl.Options{Config: cfg, Namespace: ns, Logger: log.logger(), HealthAddress: "127.0.0.1:0",
				LeaderElection: ctrl.LeaderElection{Name: "rbac-test"}})
			must(t, err)
			configMaps := newClient[*corev1.ConfigMap](t, mgr)
			widgets := newClient[*Widget](t, mgr)
			events, err := ctrl.NewRecorder[*Widget](mgr, "widget-rbac")
			must(t, err)
			_, err = ctrl.NewController(mgr, "labeler", func(ctx context.Context, cm *corev1.ConfigMap) (ctrl.Result, error) {
				if cm.Labels["seen"] == "yes" {
					return ctrl.Result{}, nil
				}
				_, err := configMaps.Patch(ctx, ctrl.KeyOf(cm), "application/merge-patch+json", []byte(`{"metadata":{"labels":{"seen":"yes"}}}`))
				return ctrl.Result{}, err
			}, ctrl.ControllerOptions{})
			must(t, err)
			wc, err := ctrl.NewController(mgr, "widgets", func(ctx context.Context, w *Widget) (ctrl.Result, error) {
				if w.Status.Phase == "Seen" {
					return ctrl.Result{}, nil
				}
				w.Status.Phase = "Seen"
				if _, err := widgets.UpdateStatus(ctx, w); err != nil {
					return ctrl.Result{}, err
				}
				events.Event(w, corev1.EventTypeNormal, "Seen", "seen")
				return ctrl.Result{}, nil
			}, ctrl.ControllerOptions{})
			must(t, err)
			must(t, wc.OnFinalize("example.com/rbac-test", func(context.Context, *Widget) error { return nil }))

			rules := mgr.RBACRules()
			want := []string{ // sorted by group and resource
				"[] [configmaps] [list watch]",
				"[] [events] [create patch update]",
				"[coordination.k8s.io] [leases] [create get update]",
				"[example.com] [widgets] [get list patch watch]",
			}
			var got []string
			for _, r := range rules {
				got = append(got, fmt.Sprint(r.APIGroups, r.Resources, r.Verbs))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("RBACRules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for i, r := range rules {
				if tt.missing != "" && r.Resources[0] == "widgets" {
					rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == tt.missing })
				}
			}
			grantRole(t, ns, "controller", append(rules, ownWrites...), cfg)

			_, err = clientset.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			must(t, err)
			must(t, clientset.CoreV1().RESTClient().Post().AbsPath("/apis/example.com/v1/namespaces", ns, "widgets").
				Body([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1}}`)).Do(context.Background()).Error())
			began := time.Now()
			ctx := start(t, mgr)

			// The labeler reconciles whatever happens to the Widgets.
			eventually(t, time.Minute, func() error {
				cm, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, "c", metav1.GetOptions{})
				if err == nil && cm.Labels["seen"] != "yes" {
					err = fmt.Errorf("ConfigMap c has labels %v, want seen=yes", cm.Labels)
				}
				return err
			})
			if tt.missing == "" {
				waitIdle(t, mgr)
				got, err := widgets.Get(ctx, ctrl.Key{Namespace: ns, Name: "w"})
				must(t, err)
				if got.Status.Phase != "Seen" || !slices.Contains(got.Finalizers, "example.com/rbac-test") {
					t.Errorf("got Widget status %+v, finalizers %v; want Seen and the finalizer", got.Status, got.Finalizers)
				}
				if code, body := readyz(t, mgr); code != http.StatusOK {
					t.Errorf("readyz: got %d %s, want 200", code, body)
				}
				eventually(t, time.Minute, func() error {
					list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
					if err == nil && len(list.Items) == 0 {
						err = fmt.Errorf("no Event yet")
					}
					return err
				})
				must(t, clientset.CoreV1().RESTClient().Delete().AbsPath("/apis/example.com/v1/namespaces", ns, "widgets", "w").Do(ctx).Error())
				eventually(t, time.Minute, func() error {
					err := clientset.CoreV1().RESTClient().Get().AbsPath("/apis/example.com/v1/namespaces", ns, "widgets", "w").Do(ctx).Error()
					if apierrors.IsNotFound(err) {
						return nil
					}
					return fmt.Errorf("the Widget is still there (%v): its finalizer was not removed", err)
				})
				if n := log.count("forbidden"); n != 0 {
					t.Errorf("%d log lines about refusals, want none:\n%s", n, log.String())
				}
				return
			}

			rule := fmt.Sprintf(`forbidden to %s widgets.example.com in namespace %q: add the rule {apiGroups: ["example.com"], resources: ["widgets"], verbs: [%q]}`, tt.missing, ns, tt.missing)
			// The first list or watch of Widgets is refused as soon as the
			// manager starts, well within the five seconds the report may
			// take, however loaded the machine.
			eventually(t, time.Minute, func() error {
				if code, body := readyz(t, mgr); code != tt.readyz || !strings.Contains(body, rule) {
					return fmt.Errorf("readyz: got %d %q, want %d with %q", code, body, tt.readyz, rule)
				}
				return nil
			})
			took := time.Since(began)
			if took > 5*time.Second {
				t.Errorf("the refusal showed in /readyz %s after Start, want within 5s", took.Round(time.Millisecond))
			}
			t.Logf("the refusal showed in /readyz %s after Start", took.Round(time.Millisecond))
			if n := log.count(strings.ReplaceAll(rule, `"`, `\"`)); n != 1 {
				t.Errorf("%d log lines with the rule, want 1:\n%s", n, log.String())
			}
			for _, s := range []string{"lost the watch", "watch is back"} {
				if n := log.count(s); n != 0 {
					t.Errorf("%d lines %q, want none:\n%s", n, s, log.String())
				}
			}
			// The labeler still reconciles new ConfigMaps.
			_, err = clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, metav1.CreateOptions{})
			must(t, err)
			eventually(t, time.Minute, func() error {
				cm, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, "d", metav1.GetOptions{})
				if err == nil && cm.Labels["seen"] != "yes" {
					err = fmt.Errorf("ConfigMap d has labels %v, want seen=yes", cm.Labels)
				}
				return err
			})
		})
	}
}

// grantRole binds a Role of rules in ns to the ServiceAccount name, and
// waits until the authorizer applies it to cfg, the ServiceAccount's.
func grantRole(t *testing.T, ns, name string, rules []rbacv1.PolicyRule, cfg *rest.Config) {
	t.Helper()
	ctx := context.Background()
	_, err := clientset.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	must(t, err)
	_, err = clientset.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err)
	sa, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	eventually(t, time.Minute, func() error {
		_, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}

// readyz returns the status and body of the manager's /readyz.
func readyz(t *testing.T, mgr *ctrl.Manager) (int, string) {
	t.Helper()
	addr := mgr.Addresses().Health
	if addr == "" {
		return 0, "not listening yet"
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// logLines is a logger that keeps its lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
