#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from the Go module
# proxy into <repo>/bin. Safe to run repeatedly: the Go build cache makes a
# rebuild with no changes take a few seconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
bin="${BIN_DIR:-${root}/bin}"
mkdir -p "${bin}"
cd "${here}"

# Version stamping as Kubernetes' own build does it (hack/lib/version.sh), so
# that /version reports the release. Everything is derived from go.mod; the
# build date is the release's module timestamp, which keeps the ldflags stable
# so an unchanged tree never relinks.
kube_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
build_date="$(go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
major="${kube_version#v}"
major="${major%%.*}"
minor="${kube_version#v*.}"
minor="${minor%%.*}"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X ${pkg}.gitVersion=${kube_version}"
	ldflags+=" -X ${pkg}.gitMajor=${major}"
	ldflags+=" -X ${pkg}.gitMinor=${minor}"
	# The module proxy does not carry the release's commit hash.
	ldflags+=" -X ${pkg}.gitCommit="
	ldflags+=" -X ${pkg}.gitTreeState=clean"
	ldflags+=" -X ${pkg}.buildDate=${build_date}"
done

# Static binaries without VCS stamping: no C toolchain needed, and the state of
# the surrounding git checkout does not force a relink.
export CGO_ENABLED=0
go build -trimpath -buildvcs=false -ldflags "${ldflags}" -o "${bin}/" \
	./etcd \
	k8s.io/kubernetes/cmd/kube-apiserver
