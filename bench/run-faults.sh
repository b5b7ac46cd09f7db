#!/usr/bin/env bash
# Runs the fault-recovery driver with its defaults: 1000 source ConfigMaps,
# 200 writes/s, R=2 repetitions of ctrl, cr and raw, through three scenarios:
# faults (90 s of writes, the API server killed four times and the
# controller paused twice, once across an API server restart), stop (the
# writes stop at an API server kill while every source has a change the
# controller has not mirrored) and blackhole (the controller's connections go
# silently dead). Extra arguments go to the driver, for example:
#
#   bench/run-faults.sh -write                                        # also write its section of BENCHMARKS.md
#   bench/run-faults.sh -objects 200 -duration 30s -kills 1 -pauses 1 -r 1   # a quick smoke run
#   bench/run-faults.sh -scenarios stop,blackhole -r 1                # only some scenarios
#
# Needs the control plane binaries in bin/ (`make controlplane`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x ../bin/kube-apiserver ] || [ ! -x ../bin/etcd ]; then
	make -C .. controlplane
fi
exec go run ./cmd/faults "$@"
