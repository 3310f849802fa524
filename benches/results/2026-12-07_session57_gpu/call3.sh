#!/bin/bash
# Session 57, call 3 (carry .gpu-w as for call1.sh): cut to what 283 s of device time could hold:
# gpu_suballocators and gpu_resources (the size classes on a GPU), gpu_generated (next-gpu).
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
for t in gpu_suballocators gpu_resources gpu_generated; do
  REQUIRE_GPU=1 timeout 40 $B/test-$t > $L/t_$t.log 2>&1; say "$t rc=$? $(grep -E 'test result' $L/t_$t.log | tail -1)"
  grep -E "panicked|FAILED" -A3 $L/t_$t.log | head -12 >> "$S"
done; say "tests done at ${SECONDS}s"; pack_logs
