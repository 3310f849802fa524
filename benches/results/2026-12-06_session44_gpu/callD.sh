#!/usr/bin/env bash
# Session 44's fourth device call, right after callC.sh on the same warm machine: issue 53's
# tools at 1 M cells beside rapids-singlecell 0.18.1 (its wheel in .rsc-bench, extra/ left out
# for 64 MiB), aggregate and score_genes now reading X on the GPU as rsc does; then where
# diffmap's time goes at 1 M (SCPIPE_TRACE_PHASES) and bbknn on the GPU.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
LIMIT=200 timeout 430 bash scripts/device/benchmarks/tools_side_by_side.sh 1000000 \
  aggregate,score_genes,pearson_residuals,hvg_pearson,diffmap
echo "=== scpipe diffmap and bbknn at 1 M, phases"
SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap,bbknn > "$OUT/phases.txt" 2>&1
grep -E "diffmap|bbknn|cells" "$OUT/phases.txt" | tail -20
