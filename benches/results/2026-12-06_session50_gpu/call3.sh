#!/usr/bin/env bash
# Session 50's third device call: regress_out beside rapids-singlecell 0.18.1 at 1,000,000 cells
# (rsc_bench.py's file through QC, filters, normalize, log1p and 2,000 HVGs with each library),
# with the step's phases. Carry .whl and .rsc-bench (its whl/ with rapids-singlecell's wheel).
set -uo pipefail
PROFILE=1 SCPIPE_TRACE_PHASES=1 bash scripts/device/benchmarks/regress_side_by_side.sh 1000000
