package ctrl

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is implemented by every Kubernetes API object: a pointer to a
// struct with TypeMeta and ObjectMeta and a generated DeepCopyObject, such as
// *corev1.ConfigMap or a custom resource type.
type Object interface {
	metav1.Object
	runtime.Object
}

// Key names an object: its namespace ("" for cluster-scoped objects), its
// name, and, in a manager that reconciles a fleet, its cluster. Queues hold
// keys, so each is reconciled against its object's latest state.
type Key struct {
	Namespace, Name string
	// Cluster names the member cluster the object lives in; "" is the
	// manager's own cluster.
	Cluster string
}

// KeyOf returns the key of obj in the manager's own cluster; use
// [Key.InCluster] for another cluster.
func KeyOf(obj metav1.Object) Key { return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()} }

// String returns "namespace/name", or "name" for cluster-scoped objects,
// prefixed with "cluster:" for an object of a member cluster.
func (k Key) String() string {
	s := k.Name
	if k.Namespace != "" {
		s = k.Namespace + "/" + k.Name
	}
	if k.Cluster != "" {
		s = k.Cluster + ":" + s
	}
	return s
}

// InCluster returns the key with the same namespace and name in cluster.
func (k Key) InCluster(cluster string) Key {
	k.Cluster = cluster
	return k
}
