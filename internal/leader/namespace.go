package leader

import (
	"os"
	"strings"
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
