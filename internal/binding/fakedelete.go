package binding

import (
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// Deletion in fakes. Client-go's fakes remove an object as soon as it is
// deleted, finalizers or not, so a finalizer could never run in a unit
// test. LikeServer teaches a fake what the API server does (and keeps
// generations, fakegen.go):
//
//   - deleting an object that has finalizers sets its deletionTimestamp
//     (and a deletionGracePeriodSeconds of 0) and keeps it; deleting it
//     again changes nothing but is seen as an update;
//   - a write to an object being deleted keeps its deletionTimestamp, and
//     the write that leaves it without finalizers removes it.
//
// It works through reactors placed just in front of the fake's own (the
// tracker's, which the fake's constructor installs for every verb and
// resource), so deletions made with the fake directly behave the same way,
// and reactors a test adds with PrependReactor, before or after, still run
// first: a test can make a finalizer's removal fail. Graceful deletion of
// Pods (held until the kubelet confirms) is not imitated: no kubelet runs.

// trackerFake is what LikeServer needs of a fake besides its
// testing.Fake: client-go's *fake.Clientset and
// *dynamicfake.FakeDynamicClient have it.
type trackerFake interface {
	Tracker() clienttesting.ObjectTracker
}

// LikeServer makes fake hold deletions while finalizers remain and keep
// generations, as the API server does, if it is one of client-go's fakes;
// it reports whether it could.
func LikeServer(fake any) bool {
	tf, ok := fake.(trackerFake)
	f := embeddedFake(fake)
	if !ok || f == nil {
		return false
	}
	tracker := tf.Tracker()
	ours := []clienttesting.Reactor{
		&clienttesting.SimpleReactor{Verb: "delete", Resource: "*", Reaction: func(a clienttesting.Action) (bool, runtime.Object, error) {
			return deleteWithFinalizers(tracker, a)
		}},
	}
	for _, verb := range []string{"create", "update", "patch"} {
		ours = append(ours, &clienttesting.SimpleReactor{Verb: verb, Resource: "*", Reaction: func(a clienttesting.Action) (bool, runtime.Object, error) {
			return write(tracker, a)
		}})
	}
	f.Lock()
	defer f.Unlock()
	at := 0 // the front, if the fake's own reactor is not found
	for i := len(f.ReactionChain) - 1; i >= 0; i-- {
		if r, ok := f.ReactionChain[i].(*clienttesting.SimpleReactor); ok && r.Verb == "*" && r.Resource == "*" {
			at = i
			break
		}
	}
	f.ReactionChain = slices.Insert(f.ReactionChain, at, ours...)
	return true
}

// embeddedFake returns the testing.Fake that client-go's fakes embed, or
// nil.
func embeddedFake(fake any) *clienttesting.Fake {
	if f, ok := fake.(*clienttesting.Fake); ok {
		return f
	}
	v := reflect.ValueOf(fake)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	field := v.Elem().FieldByName("Fake")
	if !field.IsValid() || field.Type() != reflect.TypeFor[clienttesting.Fake]() {
		return nil
	}
	return field.Addr().Interface().(*clienttesting.Fake)
}

// deleteWithFinalizers marks an object with finalizers deleted instead of
// removing it. Other deletes are left to the fake.
func deleteWithFinalizers(tracker clienttesting.ObjectTracker, a clienttesting.Action) (bool, runtime.Object, error) {
	d, ok := a.(clienttesting.DeleteActionImpl)
	if !ok {
		return false, nil, nil
	}
	gvr, ns := d.GetResource(), d.GetNamespace()
	obj, err := tracker.Get(gvr, ns, d.GetName())
	if err != nil {
		return false, nil, nil // the fake answers NotFound
	}
	m, err := meta.Accessor(obj)
	if err != nil || len(m.GetFinalizers()) == 0 {
		return false, nil, nil
	}
	if p := d.DeleteOptions.Preconditions; p != nil && p.UID != nil && *p.UID != m.GetUID() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), d.GetName(),
			fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
	}
	if m.GetDeletionTimestamp() == nil {
		// As the API server's markAsDeleting (generic/registry/store.go).
		if g := m.GetGeneration(); g > 0 {
			m.SetGeneration(g + 1)
		}
		now, zero := metav1.Now(), int64(0)
		m.SetDeletionTimestamp(&now)
		m.SetDeletionGracePeriodSeconds(&zero)
	}
	// Stored even when it was already being deleted: each write to a fake
	// is seen as one watch event, which WaitIdle counts on.
	if err := tracker.Update(gvr, obj, ns); err != nil {
		return true, nil, err
	}
	return true, obj, nil
}

// write performs a create, update or patch as the API server does: the
// generation kept (fakegen.go); and for an object being deleted, the
// deletionTimestamp stays, and an object left without finalizers goes.
// Server-side apply, and actions the fake's own reactor would not know,
// are left to the fake.
func write(tracker clienttesting.ObjectTracker, a clienttesting.Action) (bool, runtime.Object, error) {
	gvr, ns := a.GetResource(), a.GetNamespace()
	var name string
	switch w := a.(type) {
	case clienttesting.CreateActionImpl:
		return clienttesting.ObjectReaction(withGenerations(tracker, a))(a)
	case clienttesting.UpdateActionImpl:
		m, err := meta.Accessor(w.GetObject())
		if err != nil {
			return false, nil, nil
		}
		name = m.GetName()
	case clienttesting.PatchActionImpl:
		if w.GetPatchType() == types.ApplyPatchType {
			return false, nil, nil
		}
		name = w.GetName()
	default:
		return false, nil, nil
	}
	tracker = withGenerations(tracker, a)
	old, err := tracker.Get(gvr, ns, name)
	if err != nil {
		return false, nil, nil // the fake answers NotFound
	}
	oldMeta, err := meta.Accessor(old)
	if err != nil || oldMeta.GetDeletionTimestamp() == nil {
		return clienttesting.ObjectReaction(tracker)(a)
	}
	keep := func(m metav1.Object) {
		m.SetDeletionTimestamp(oldMeta.GetDeletionTimestamp())
		if m.GetDeletionGracePeriodSeconds() == nil {
			m.SetDeletionGracePeriodSeconds(oldMeta.GetDeletionGracePeriodSeconds())
		}
	}
	if u, ok := a.(clienttesting.UpdateActionImpl); ok {
		obj := u.GetObject().DeepCopyObject() // the caller's object stays as it was
		m, _ := meta.Accessor(obj)
		keep(m)
		u.Object = obj
		a = u
	}
	_, out, err := clienttesting.ObjectReaction(tracker)(a)
	if err != nil || out == nil {
		return true, out, err
	}
	m, err := meta.Accessor(out)
	if err != nil {
		return true, out, nil
	}
	if m.GetDeletionTimestamp() == nil { // a patch that removed it
		keep(m)
		if err := tracker.Update(gvr, out, ns); err != nil {
			return true, nil, err
		}
	}
	if len(m.GetFinalizers()) == 0 {
		if err := tracker.Delete(gvr, ns, name); err != nil && !apierrors.IsNotFound(err) {
			return true, nil, err
		}
	}
	return true, out, nil
}
