package leader

import (
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/rand"
)

// namespaceFile is where a pod finds its namespace, beside its service
// account's token, as client-go's in-cluster configuration does.
var namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace returns the namespace of the pod the program runs in, or ""
// outside a pod: a Deployment's Leases default to it, as
// controller-runtime's do, so that its Role is in its own namespace.
func PodNamespace() string {
	b, err := os.ReadFile(namespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NewIdentity returns an identity for a replica in a Lease: its host name
// (a pod's name), cut to fit a DNS label, and a random suffix, so that a
// restarted process is not taken for the one before it.
func NewIdentity() string {
	host, _ := os.Hostname()
	host = strings.ToLower(strings.Trim(host, "-."))
	host = strings.Trim(strings.ReplaceAll(host[:min(len(host), 40)], ".", "-"), "-")
	return strings.TrimLeft(host+"-"+rand.String(8), "-")
}
