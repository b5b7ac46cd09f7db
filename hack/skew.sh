#!/usr/bin/env bash
# `make test-skew`: runs the suites that start a real kube-apiserver against
# each supported Kubernetes release, one release after another, and prints
# how long each took. Each release's control plane is built first, with the
# command users run (ctrltest/cmd/controlplane), from its tools module:
# hack/controlplane-1.X into bin/v1.X for the releases before the client's,
# hack/controlplane into bin/ for the client's own (what `make test` uses).
# A cold build of kube-apiserver takes several minutes; a warm one seconds.
#
# SKEW_RELEASES chooses the releases (default: every supported one);
# SKEW_PACKAGES the packages; SKEW_RUN a -run pattern. Every release runs
# even if an earlier one fails; the script fails if any did.
#
# To add a release: go run ./ctrltest/cmd/controlplane -release v1.X.Y
# -module hack/controlplane-1.X -o bin/v1.X, commit hack/controlplane-1.X,
# and add 1.X here and to README's "Supported Kubernetes versions".
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
releases="${SKEW_RELEASES:-1.34 1.35 1.36 1.37}"
packages="${SKEW_PACKAGES:-./internal/integration ./internal/production ./internal/faults ./ctrltest ./examples/...}"
go="${GO:-go}"

failed=()
summary=()
for release in ${releases}; do
	module="hack/controlplane-${release}" bin="bin/v${release}"
	if [ ! -d "${module}" ]; then
		module="hack/controlplane" bin="bin" # the client's own release
	fi
	if ! "${go}" run ./ctrltest/cmd/controlplane -module "${module}" -o "${bin}" >/dev/null; then
		failed+=("${release} (build)")
		continue
	fi
	server="$("${bin}/kube-apiserver" --version)"
	case "${server}" in
	"Kubernetes v${release}."*) ;;
	*)
		echo "test-skew: ${module} built ${server}, want ${release}" >&2
		failed+=("${release} (build)")
		continue
		;;
	esac
	echo "== test-skew: ${server}"
	began=$(date +%s)
	CTRL_CONTROLPLANE_BIN="${root}/${bin}" "${go}" test -race -short -count=1 -timeout 40m ${SKEW_RUN:+-run "${SKEW_RUN}"} ${packages}
	status=$?
	took=$(($(date +%s) - began))
	summary+=("${server}: $([ ${status} = 0 ] && echo ok || echo FAIL) in $((took / 60))m$((took % 60))s")
	[ ${status} = 0 ] || failed+=("${release}")
done

echo "== test-skew summary"
for line in "${summary[@]}"; do
	echo "${line}"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-skew: failed on ${failed[*]}" >&2
	exit 1
fi
