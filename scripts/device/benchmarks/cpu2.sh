#!/usr/bin/env bash
# Issue 8 item 9: scanpy and scpipe's CPU path on 2 cores of the same machine, same file.
# Run in place (bash scripts/device/benchmarks/cpu2.sh) with .gpu-run and .rsc-bench carried.
set -o pipefail
cd "$(dirname "$0")/../../.."   # the repository root
source scripts/device/rsc_env.sh
rsc_input 50000
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2 NUMBA_NUM_THREADS=2
echo "=== scpipe --device cpu --threads 2 (taskset 0,1)"
for i in 1 2; do taskset -c 0,1 .gpu-run/scpipe run $F -o /tmp/cpu.h5ad --device cpu --threads 2 --no-neighbors --report $OUT/cpu2_$i.json 2>&1 | tail -17; done
echo "=== scanpy (taskset 0,1, 2 threads)"
taskset -c 0,1 python3 .rsc-bench/rsc_bench.py --no-gpu --no-write-h5ad --n-cells 50000 --cpu-deadline 150 2>&1 | grep -E "CPU |read|warm-up" | tail -20
