#!/usr/bin/env bash
# Prepared for the next session, right after next_callA.sh on the same warm machine (issue 53's
# speed gate: each function at or ahead of rapids-singlecell's warm call at 1 M cells, same call).
# Carry .whl and .rsc-bench with the rapids-singlecell wheel but without extra/ (64 MiB): so no
# louvain row (igraph). The residuals' warm gap at 500,000 cells was 14 ms against 6 ms.
set -uo pipefail
LIMIT=280 timeout 580 bash scripts/device/benchmarks/tools_side_by_side.sh 1000000 \
  aggregate,embedding_density,diffmap,kmeans,score_genes,pearson_residuals,hvg_pearson,bbknn
