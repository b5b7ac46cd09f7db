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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
	"github.com/typedctrl/ctrl/examples/provisioner"
)

// setups are the two controllers of the package: the same behaviour, with
// and without ctrl.Machine.
var setups = map[string]func(*ctrl.Manager, provisioner.Options) error{
	"machine": provisioner.Setup,
	"plain":   provisioner.SetupPlain,
}

// TestBucketsOnFakes runs both controllers against client-go's fakes: a
// Bucket whose storage's name is free becomes Ready, one whose name is
// taken waits in Retrying, and both say so in the same conditions and
// Events.
func TestBucketsOnFakes(t *testing.T) {
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			blocker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "taken-bucket"}}
			clientset := fake.NewClientset(blocker)
			mgr, err := ctrl.NewManager(ctrl.Options{
				FakeClientset: clientset,
				FakeDynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
					map[schema.GroupVersionResource]string{{Group: "example.ctrl.dev", Version: "v1", Resource: "buckets"}: "BucketList"}),
			})
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
			configMaps, err := ctrl.NewClient[*corev1.ConfigMap](mgr, ctrl.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
			}()

			for _, n := range []string{"free", "taken"} {
				// The fakes set no UID: owner references need one.
				b := &provisioner.Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n, UID: types.UID("uid-" + n)}, Spec: provisioner.Spec{Size: 3}}
				if _, err := buckets.Create(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}

			for n, want := range map[string]struct {
				phase  provisioner.Phase
				reason string
			}{"free": {provisioner.Ready, "Provisioned"}, "taken": {provisioner.Retrying, "NameTaken"}} {
				b, err := buckets.Get(ctx, ctrl.Key{Namespace: "default", Name: n})
				if err != nil {
					t.Fatal(err)
				}
				c := meta.FindStatusCondition(b.Status.Conditions, "Ready")
				if b.Status.Phase != want.phase || c == nil || c.Reason != want.reason || b.Status.Attempts != 1 || !slices.Equal(b.Finalizers, []string{provisioner.Finalizer}) {
					t.Errorf("%s: got phase %s, condition %+v, %d attempts, finalizers %v; want %s, reason %s, 1 attempt, the finalizer",
						n, b.Status.Phase, c, b.Status.Attempts, b.Finalizers, want.phase, want.reason)
				}
			}
			cm, err := configMaps.Get(ctx, ctrl.Key{Namespace: "default", Name: "free-bucket"})
			if err != nil {
				t.Fatal(err)
			}
			if cm.Data["size"] != "3" {
				t.Errorf("got storage data %v, want size 3", cm.Data)
			}

			want := []string{
				"free Normal Created: Pending: new object",
				"free Normal Accepted: Pending -> Provisioning: size 3",
				"free Normal Provisioned: Provisioning -> Ready: storage free-bucket",
				"taken Normal Created: Pending: new object",
				"taken Normal Accepted: Pending -> Provisioning: size 3",
				"taken Warning NameTaken: Provisioning -> Retrying: name taken: ConfigMap taken-bucket belongs to someone else",
			}
			var got []string
			for deadline := time.Now().Add(30 * time.Second); ; {
				list, err := clientset.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
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
				if len(got) >= len(want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // polling for Events, which WaitIdle does not track
			}
			if !slices.Equal(got, want) {
				t.Errorf("got Events\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			}
		})
	}
}
