// Package registry resolves image tags to digests with the OCI distribution
// API. Both halves of the port example use it: examples/port, written with
// ctrl, and bench/cmd/port-cr, written with controller-runtime.
package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Resolve returns image pinned to the digest its tag names now:
// "registry.example.com/web:stable" becomes
// "registry.example.com/web@sha256:...". It asks the registry with a HEAD of
// the manifest, anonymously; registries that want a token are beyond this
// example.
func Resolve(ctx context.Context, image string) (string, error) {
	host, rest, _ := strings.Cut(image, "/")
	repo, tag, ok := strings.Cut(rest, ":")
	if host == "" || repo == "" || !ok {
		return "", fmt.Errorf("resolve %q: want host/repository:tag", image)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "https://"+host+"/v2/"+repo+"/manifests/"+tag, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", image, err)
	}
	resp.Body.Close()
	digest := resp.Header.Get("Docker-Content-Digest")
	if resp.StatusCode != http.StatusOK || digest == "" {
		return "", fmt.Errorf("resolve %s: %s", image, resp.Status)
	}
	return host + "/" + repo + "@" + digest, nil
}
