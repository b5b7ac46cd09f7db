package ctrl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedctrl/ctrl"
)

// Bucket is a custom resource provisioned in steps. A Machine keeps its
// phase, conditions and observedGeneration in its status.
type Bucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BucketSpec   `json:"spec,omitempty"`
	Status            BucketStatus `json:"status,omitempty"`
}

type BucketSpec struct {
	Region string `json:"region,omitempty"`
}

type BucketStatus struct {
	Phase              BucketPhase        `json:"phase,omitempty"`
	Attempts           int                `json:"attempts,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func (b *Bucket) DeepCopyObject() runtime.Object {
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(b.Status.Conditions)
	return &out
}

// BucketPhase is the state of a Bucket.
type BucketPhase string

const (
	BucketPending      BucketPhase = "Pending"
	BucketProvisioning BucketPhase = "Provisioning"
	BucketRetrying     BucketPhase = "Retrying"
	BucketReady        BucketPhase = "Ready"
	BucketDeleting     BucketPhase = "Deleting"
	BucketDeleted      BucketPhase = "Deleted"
)

var buckets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "buckets"}

func init() {
	if err := ctrl.Register[*Bucket](ctrl.APIResource{Group: "example.com", Version: "v1", Resource: "buckets", Namespaced: true, Status: true}); err != nil {
		panic(err)
	}
}

// cloud is where buckets are made: a map, and a number of creations that
// fail first.
type cloud struct {
	mu       sync.Mutex
	failures int
	buckets  map[string]bool
}

func (c *cloud) create(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failures > 0 {
		c.failures--
		return errors.New("quota exceeded")
	}
	c.buckets[name] = true
	return nil
}

func (c *cloud) delete(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.buckets, name)
}

// bucketMachine declares the life of a Bucket: Pending, Provisioning,
// Retrying after a failure, Ready; and, once deleted, Deleting and Deleted.
func bucketMachine(c *cloud, retryDelay time.Duration) ctrl.Machine[*Bucket, BucketPhase] {
	type next = ctrl.Next[BucketPhase]
	return ctrl.Machine[*Bucket, BucketPhase]{
		Initial: BucketPending,
		States: map[BucketPhase]ctrl.State[*Bucket, BucketPhase]{
			BucketPending: {
				To: []BucketPhase{BucketProvisioning},
				Step: func(ctx context.Context, b *Bucket) (next, error) {
					return next{To: BucketProvisioning, Reason: "Accepted", Message: "region " + b.Spec.Region}, nil
				},
			},
			BucketProvisioning: {
				To: []BucketPhase{BucketReady, BucketRetrying},
				Step: func(ctx context.Context, b *Bucket) (next, error) {
					b.Status.Attempts++ // written with the move
					if err := c.create(b.Name); err != nil {
						return next{To: BucketRetrying, Reason: "ProvisionFailed", Message: err.Error(), Warning: true}, nil
					}
					return next{To: BucketReady, Reason: "Provisioned", Message: "bucket " + b.Name + " created"}, nil
				},
			},
			BucketRetrying: {
				To:          []BucketPhase{BucketProvisioning},
				SpecChanged: BucketProvisioning, // a new spec may fix it: no need to wait
				Step: func(ctx context.Context, b *Bucket) (next, error) {
					// The condition's lastTransitionTime is when the Bucket got here.
					entered := meta.FindStatusCondition(b.Status.Conditions, "Ready").LastTransitionTime
					if wait := time.Until(entered.Add(retryDelay)); wait > 0 {
						return next{RequeueAfter: wait}, nil
					}
					return next{To: BucketProvisioning, Reason: "Retry", Message: "trying again"}, nil
				},
			},
			BucketReady: {Ready: true, SpecChanged: BucketProvisioning},
			BucketDeleting: {
				To: []BucketPhase{BucketDeleted},
				Step: func(ctx context.Context, b *Bucket) (next, error) {
					c.delete(b.Name)
					return next{To: BucketDeleted, Reason: "Deprovisioned", Message: "bucket " + b.Name + " deleted"}, nil
				},
			},
			BucketDeleted: {}, // the end of the cleanup path: the finalizer goes
		},
		Phase:              func(b *Bucket) *BucketPhase { return &b.Status.Phase },
		Conditions:         func(b *Bucket) *[]metav1.Condition { return &b.Status.Conditions },
		ObservedGeneration: func(b *Bucket) *int64 { return &b.Status.ObservedGeneration },
		Finalizer:          "example.com/bucket",
		Deleting:           BucketDeleting,
	}
}

// A Bucket goes Pending, Provisioning, Retrying after a failure,
// Provisioning again and Ready; deleted, it is cleaned up through Deleting
// before its finalizer goes. Each move is an Event.
func ExampleNewMachine() {
	clientset := fake.NewClientset() // serves the Events
	mgr, err := ctrl.NewManager(ctrl.Options{FakeClientset: clientset, FakeDynamic: newBucketFake()})
	if err != nil {
		panic(err)
	}
	c := &cloud{failures: 1, buckets: map[string]bool{}}
	if _, err := ctrl.NewMachine(mgr, "bucket", bucketMachine(c, 50*time.Millisecond), ctrl.ControllerOptions{}); err != nil {
		panic(err)
	}
	client, err := ctrl.NewClient[*Bucket](mgr, ctrl.ClientOptions{})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	b := &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "photos"}, Spec: BucketSpec{Region: "eu-west-1"}}
	if _, err := client.Create(ctx, b); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	b, err = client.Get(ctx, ctrl.KeyOf(b))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s after %d attempts, finalizers %v\n", b.Name, b.Status.Phase, b.Status.Attempts, b.Finalizers)

	if err := client.Delete(ctx, ctrl.KeyOf(b), metav1.DeleteOptions{}); err != nil {
		panic(err)
	}
	if err := mgr.WaitIdle(ctx, time.Minute); err != nil {
		panic(err)
	}
	_, err = client.Get(ctx, ctrl.KeyOf(b))
	fmt.Printf("%s: gone %v, in the cloud %v\n", b.Name, apierrors.IsNotFound(err), c.buckets[b.Name])

	// Events are sent in the background: poll for all seven.
	for _, e := range waitForEvents(clientset, "default", 7) {
		fmt.Println(e.Type, e.Reason+":", e.Message)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// photos: Ready after 2 attempts, finalizers [example.com/bucket]
	// photos: gone true, in the cloud false
	// Normal Created: Pending: new object
	// Normal Accepted: Pending -> Provisioning: region eu-west-1
	// Warning ProvisionFailed: Provisioning -> Retrying: quota exceeded
	// Normal Retry: Retrying -> Provisioning: trying again
	// Normal Provisioned: Provisioning -> Ready: bucket photos created
	// Normal Deleting: Ready -> Deleting: the object is being deleted
	// Normal Deprovisioned: Deleting -> Deleted: bucket photos deleted
}

// Test a machine one step at a time, without a manager: each Step returns
// the object as the API server would hold it afterwards.
func ExampleMachine_Reconcile() {
	machine := bucketMachine(&cloud{buckets: map[string]bool{}}, 0)
	b := &Bucket{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "photos", Generation: 1}}
	ctx := context.Background()
	for range 3 {
		var err error
		if b, _, err = machine.Reconcile(ctx, b); err != nil {
			panic(err)
		}
		ready := meta.FindStatusCondition(b.Status.Conditions, "Ready")
		fmt.Println(b.Status.Phase, ready.Status, ready.Reason, b.Finalizers)
	}
	b.Generation = 2 // a new spec
	b, _, _ = machine.Reconcile(ctx, b)
	fmt.Println(b.Status.Phase, meta.FindStatusCondition(b.Status.Conditions, "Ready").Message)
	// Output:
	// Pending False Created [example.com/bucket]
	// Provisioning False Accepted [example.com/bucket]
	// Ready True Provisioned [example.com/bucket]
	// Provisioning generation 2
}

// newBucketFake returns client-go's fake dynamic client, set up to serve
// Buckets.
func newBucketFake() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{buckets: "BucketList"})
}

// waitForEvents polls the fake for the Events of namespace ns until there
// are n, and returns them in the order they were emitted: their names end
// in the time of emission, in hex.
func waitForEvents(clientset *fake.Clientset, ns string, n int) []corev1.Event {
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			panic(err)
		}
		if len(list.Items) >= n || time.Now().After(deadline) {
			slices.SortFunc(list.Items, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
			return list.Items
		}
		time.Sleep(10 * time.Millisecond) // polling the fake for Events, which WaitIdle does not track
	}
}
