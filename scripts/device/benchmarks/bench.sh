#!/usr/bin/env bash
# scpipe and rapids-singlecell on the same generated file (benches/WORKLOADS.md B), one device call.
# Run in place (bash scripts/device/benchmarks/bench.sh N [harmony]) with .gpu-run and .rsc-bench carried.
set -o pipefail
cd "$(dirname "$0")/../../.."   # the repository root
N=${1:-200000}
# With a second argument `harmony`: scpipe also runs harmony_integrate(key='batch') and neighbors on
# X_pca_harmony (rsc_bench runs both anyway; its neighbors needs cuML and is reported as failed).
if [ "${2:-}" = harmony ]; then STEPS="--harmony batch"; BSTEPS="--harmony batch --neighbors"; else STEPS=--no-neighbors; BSTEPS=; fi
export SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
source scripts/device/rsc_env.sh
for f in /tmp/rsc_bench_*x20000_seed0.h5ad; do [ "$f" = /tmp/rsc_bench_${N}x20000_seed0.h5ad ] || rm -f "$f"; done  # other sizes' inputs
rsc_input "$N"
# Each run writes its output anew: the last one is removed first (two 1M outputs and the input
# do not fit the machine's 64 GB disk).
rm -f /tmp/ours.h5ad
rm -rf $SCPIPE_KERNEL_CACHE
echo "=== scpipe, fresh process, empty kernel cache"; .gpu-run/scpipe run $F -o /tmp/ours.h5ad --device gpu $STEPS --report $OUT/ours_cold.json 2>&1 | tail -21
rm -f /tmp/ours.h5ad; echo "=== scpipe, fresh process, kernels cached"; .gpu-run/scpipe run $F -o /tmp/ours.h5ad --device gpu $STEPS --report $OUT/ours_cached.json 2>&1 | tail -21
echo "=== bench-gpu_pipeline (run 1 cold, run 2 warm, one process)"; .gpu-run/bench-gpu_pipeline $F --runs 2 $BSTEPS --json-prefix $OUT/bench_run 2>&1 | tail -20
python3 .rsc-bench/rsc_bench.py --no-cpu --no-write-h5ad --n-cells $N 2>&1 | grep -v -E "FutureWarning|__version__" > $OUT/rsc.log; tail -22 $OUT/rsc.log
echo "=== side by side: fresh process, empty cache"; python3 .rsc-bench/side_by_side.py $OUT/ours_cold.json $OUT/rsc_bench.json 2>&1 | tail -20
echo "=== side by side: warm (run 2 of the bench)"; python3 .rsc-bench/side_by_side.py $OUT/bench_run2.json $OUT/rsc_bench.json 2>&1 | tail -20
