#!/bin/bash
# Session 59, call 1: session 58's call 2 (rmm-core's GPU tests, gpu_suballocators, issue 55's
# one-thread cells beside RMM 26.10, pinned to core 3), on a bundle rebuilt at 7e46152 as that
# folder's README says (gpu.txz, test-gpu_suballocators, rmm-bench.tar.xz's ours/); then our
# harness on the simulated device on this machine's core 3, one stream and across two streams:
# is the cross-stream pair's cost on this machine the CPU's or the driver's?
set -u
bash benches/results/2026-12-07_session58_gpu/call2.sh
B=.gpu-w
source scripts/device/call_preamble.sh
for flag in "" --cross-stream; do
  taskset -c 3 .rmm-bench/ours/bench-random_allocations --device sim --only pool,arena --threads 1 $flag \
    2>&1 | grep " x1:" | sed "s/^/sim ${flag:-one-stream}: /" >> "$S"
done
say "sim done at ${SECONDS}s"; pack_logs
