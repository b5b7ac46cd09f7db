package provisioner_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/ctrltest"
	"github.com/typedctrl/ctrl/examples/provisioner"
)

// TestBucketLifecycle runs both controllers against a real API server, each
// in a namespace of its own, through a Bucket's whole life: Ready at once
// when its storage's name is free; Retrying while the name is taken, and
// Provisioning again when its spec changes; deleted, held by the finalizer
// until Deleting has removed its storage. Both leave the same history in
// Events.
func TestBucketLifecycle(t *testing.T) {
	env := ctrltest.Start(t, ctrltest.Options{CRDs: [][]byte{provisioner.CRD}})
	clientset, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			ns, err := clientset.CoreV1().Namespaces().Create(context.Background(),
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			runLifecycle(t, env, clientset, ns.Name, setup)
		})
	}
}

func runLifecycle(t *testing.T, env *ctrltest.Env, clientset kubernetes.Interface, ns string, setup func(*ctrl.Manager, provisioner.Options) error) {
	mgr, err := ctrl.NewManager(ctrl.Options{Config: env.Config(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr, provisioner.Options{RetryDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	buckets, err := ctrl.NewClient[*provisioner.Bucket](mgr, ctrl.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
		goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
	}()
	waitIdle := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string) provisioner.Phase {
		t.Helper()
		b, err := buckets.Get(ctx, ctrl.Key{Namespace: ns, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return b.Status.Phase
	}

	// Someone else's ConfigMap holds the name of one Bucket's storage.
	blocker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-bucket"}}
	if _, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"free", "taken"} {
		b := &provisioner.Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: provisioner.Spec{Size: 1}}
		if _, err := buckets.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle()
	if p, q := phase("free"), phase("taken"); p != provisioner.Ready || q != provisioner.Retrying {
		t.Fatalf("got free %s and taken %s, want Ready and Retrying", p, q)
	}

	// The name is free again, and a new spec tries again at once.
	if err := clientset.CoreV1().ConfigMaps(ns).Delete(ctx, blocker.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := buckets.Patch(ctx, ctrl.Key{Namespace: ns, Name: "taken"}, types.MergePatchType, []byte(`{"spec":{"size":2}}`)); err != nil {
		t.Fatal(err)
	}
	waitIdle()
	if p := phase("taken"); p != provisioner.Ready {
		t.Fatalf("got taken %s after the spec change, want Ready", p)
	}
	cm, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, "taken-bucket", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["size"] != "2" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Name != "taken" {
		t.Errorf("got storage %v owned by %v, want size 2, owned by the Bucket taken", cm.Data, cm.OwnerReferences)
	}

	for _, name := range []string{"free", "taken"} {
		if err := buckets.Delete(ctx, ctrl.Key{Namespace: ns, Name: name}, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle()
	for _, name := range []string{"free", "taken"} {
		if _, err := buckets.Uncached().Get(ctx, ctrl.Key{Namespace: ns, Name: name}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: got %v, want NotFound once cleaned up", name, err)
		}
		// No garbage collector runs here: Deleting removed the storage.
		if _, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, name+"-bucket", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: got %v getting its storage, want NotFound", name, err)
		}
	}

	want := []string{
		"free Normal Created: Pending: new object",
		"free Normal Accepted: Pending -> Provisioning: size 1",
		"free Normal Provisioned: Provisioning -> Ready: storage free-bucket",
		"free Normal Deleting: Ready -> Deleting: the object is being deleted",
		"free Normal Deprovisioned: Deleting -> Deleted: storage removed",
		"taken Normal Created: Pending: new object",
		"taken Normal Accepted: Pending -> Provisioning: size 1",
		"taken Warning NameTaken: Provisioning -> Retrying: name taken: ConfigMap taken-bucket belongs to someone else",
		"taken Normal SpecChanged: Retrying -> Provisioning: generation 2",
		"taken Normal Provisioned: Provisioning -> Ready: storage taken-bucket",
		"taken Normal Deleting: Ready -> Deleting: the object is being deleted",
		"taken Normal Deprovisioned: Deleting -> Deleted: storage removed",
	}
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(list.Items, func(a, b corev1.Event) int {
			return strings.Compare(a.InvolvedObject.Name+a.Name, b.InvolvedObject.Name+b.Name)
		})
		got = got[:0]
		for _, e := range list.Items {
			got = append(got, fmt.Sprintf("%s %s %s: %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message))
		}
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(25 * time.Millisecond) // polling for Events, which WaitIdle does not track
	}
	if !slices.Equal(got, want) {
		t.Errorf("got Events\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
