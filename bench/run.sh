#!/usr/bin/env bash
# Runs the benchmark driver with its defaults: N=20000 ConfigMaps, G=2 update
# rounds, R=2 repetitions of ctrl, cr-default, cr-strip, raw and raw-strip,
# and the diagnostics ctrl-copy, raw-strip-copy and raw-strip-nogzip; every
# controller's CPU profile of its update phase is sorted into buckets, and the
# API server's CPU is read and profiled over the same phase.
# Extra arguments go to the driver, for example:
#
#   bench/run.sh -write                                  # also write its section of BENCHMARKS.md
#   bench/run.sh -impls ctrl,raw-strip -r 1 -cpuprofile-dir /tmp/ctrl-prof
#   bench/run.sh -n 3000 -r 1 -apiserver-profile 0       # a smoke run
#   go run ./cmd/breakdown -top 5 /tmp/ctrl-prof/ctrl-r1-cpu-update.pprof
#
# Needs the control plane binaries in bin/ (`make controlplane`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x ../bin/kube-apiserver ] || [ ! -x ../bin/etcd ]; then
	make -C .. controlplane
fi
exec go run ./cmd/run "$@"
