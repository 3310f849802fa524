#!/usr/bin/env bash
# Session 46's second device call, on callA's warm machine: the Pearson residuals and diffmap at
# 1 M cells, ours (the wheel in .whl) then rapids-singlecell 0.18.1's (its wheel in .rsc-bench,
# extra/ left out for 64 MiB), one process a library. Carry .whl and .rsc-bench.
set -uo pipefail
LIMIT=250 timeout 560 bash scripts/device/benchmarks/tools_side_by_side.sh 1000000 pearson_residuals,diffmap
