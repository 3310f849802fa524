#!/bin/bash
# Session 58, call 2 (a device was lent late in the session). Carry .gpu-w: gpu.txz =
# ../shared/tools/gpu-bundle -p rmm-core at 5f7b4a8 (rmm-core's test binaries, .gpu/run),
# test-gpu_suballocators built at 5f7b4a8, rmm-bench.tar.xz (RMM 26.10's build from session 55,
# ours/bench-random_allocations at 5f7b4a8). 1. rmm-core's GPU tests (REQUIRE_GPU=1) and
# gpu_suballocators; 2. issue 55's one-thread cells beside RMM, both pinned to core 3, one stream
# and across two streams.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
tar -xJf $B/gpu.txz
timeout 240 bash .gpu/run > $L/gpu_run.log 2>&1; say "rmm-core GPU tests rc=$? at ${SECONDS}s: $(tail -1 $L/gpu_run.log)"
grep -E "panicked|FAILED" -A3 $L/gpu_run.log | head -12 >> "$S"
REQUIRE_GPU=1 timeout 100 $B/test-gpu_suballocators > $L/t_gpu_suballocators.log 2>&1
say "gpu_suballocators rc=$? $(grep -E 'test result' $L/t_gpu_suballocators.log | tail -1)"
pack_logs
tar -C . -xJf $B/rmm-bench.tar.xz
PIN=3 NOGRID=1 ROUNDS=1 timeout 240 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
cat "$OUT"/sub_allocators_pinned.txt >> "$S"; mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
say "issue 55 done at ${SECONDS}s"; pack_logs
