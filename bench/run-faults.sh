#!/usr/bin/env bash
# Runs the fault-recovery driver with its defaults: 1000 source ConfigMaps,
# 90 s of 200 writes/s, the API server killed four times (down 5 s each) and
# the controller paused twice, once across an API server restart; R=2
# repetitions of ctrl, cr and raw. Extra arguments go to the driver, for
# example:
#
#   bench/run-faults.sh -write                                        # also write its section of BENCHMARKS.md
#   bench/run-faults.sh -objects 200 -duration 30s -kills 1 -pauses 1 -r 1   # a quick smoke run
#
# Needs the control plane binaries in bin/ (`make controlplane`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x ../bin/kube-apiserver ] || [ ! -x ../bin/etcd ]; then
	make -C .. controlplane
fi
exec go run ./cmd/faults "$@"
