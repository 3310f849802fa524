#!/usr/bin/env bash
# On the GPU machine, from the repository root: issue 53's tools (aggregate, embedding_density,
# diffmap, louvain, kmeans, tsne, score_genes, the Pearson residuals and their HVG flavour,
# bbknn, logreg, draw_graph) at N generated cells, scpipe's beside rapids-singlecell 0.18.1's
# where its backends import, one library per process (`tools_side_by_side.py`). Carry `.whl`
# (the rmm_core wheel) and `.rsc-bench` (its `extra` folder may be left out to stay under
# 64 MiB with the rapids-singlecell wheel; without igraph the louvain rows fail).
#   bash scripts/device/benchmarks/tools_side_by_side.sh [N] [FUNCS]   (default 1000000, all)
# Output under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source scripts/device/rsc_env.sh
extra=(); [ -d .rsc-bench/extra ] && extra=(.rsc-bench/extra/*.whl)  # leave it out to fit 64 MiB
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${extra[@]}" .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for lib in scpipe rsc; do
  timeout ${LIMIT:-280} python3 scripts/device/benchmarks/tools_side_by_side.py $lib "${1:-1000000}" ${2:+"$2"} 2>&1 \
    | grep -v Warn | tail -20 | tee "$OUT/$lib.txt"
done
