#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from the tools
# module in this directory into <repo>/bin, or into $BIN_DIR, with the command
# users run in their own modules (ctrltest/cmd/controlplane). Safe to run
# repeatedly: the Go build cache makes a rebuild with no changes take seconds.
#
# This module is what that command writes for the release of k8s.io/client-go
# in ctrl's go.mod, and a test checks that it still is. To move to another
# release: change ctrl's go.mod, delete go.mod and go.sum here, run this
# script, which writes them again, and commit them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
cd "${root}"
exec go run ./ctrltest/cmd/controlplane -module "${here}" -o "${BIN_DIR:-${root}/bin}"
