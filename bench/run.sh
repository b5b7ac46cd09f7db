#!/usr/bin/env bash
# Runs the benchmark driver with its defaults: N=20000 ConfigMaps, G=2 update
# rounds, R=2 repetitions of ctrl, cr-default, cr-strip, raw and raw-strip,
# and the diagnostics ctrl-nocopy and raw-strip-copy.
# Extra arguments go to the driver, for example:
#
#   bench/run.sh -write                                  # also write its section of BENCHMARKS.md
#   bench/run.sh -impls ctrl,raw-strip -r 1 -cpuprofile-dir /tmp/ctrl-prof -profile-impls ctrl,raw-strip
#
# Needs the control plane binaries in bin/ (`make controlplane`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x ../bin/kube-apiserver ] || [ ! -x ../bin/etcd ]; then
	make -C .. controlplane
fi
exec go run ./cmd/run "$@"
