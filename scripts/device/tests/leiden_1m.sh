#!/bin/bash
# Leiden's references on the 1 M demo's exact graph (issue 29's ARI gate), in one call:
# 1. scpipe on the demo (CELLS generated on the GPU, no UMAP, no markers) with each build given:
#    the exact kNN and the inverted file (defaults; RUNS picks), each a fresh process with
#    Leiden's phases traced; their neighbors and leiden lines;
# 2. leiden_reference.py on the exact output: igraph's community_leiden (scanpy's flavor 'igraph',
#    2 iterations) with seeds 0 and 1, then (unless LEIDENALG=0) leidenalg with N_ITER iterations
#    (default 2: scanpy's n_iterations for both flavors), each partition's clusters, modularity on
#    the exact graph, ARI with the generated groups, and the gates against the reference.
# Usage: bash scripts/device/tests/leiden_1m.sh BIN_DIR [BIN_DIR ...]   (each with scpipe; carry
# .rsc-bench/extra: the wheels). Outputs are named after each directory's last component.
set -u
[ $# -ge 1 ] || { echo "give directories with scpipe"; exit 2; }
OUT=${OUT:-/tmp/out}
R=$OUT/leiden_1m; mkdir -p "$R"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-leiden
CELLS=${CELLS:-1000000}
pip install -q --no-deps --target /tmp/pyextra .rsc-bench/extra/igraph-*.whl \
  .rsc-bench/extra/leidenalg-*.whl .rsc-bench/extra/texttable-*.whl > "$R/pip.log" 2>&1 \
  || { echo "pip failed"; tail -5 "$R/pip.log"; }
export PYTHONPATH=/tmp/pyextra${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
run() {  # build dir, name, options...
  local B=$1 name=$(basename "$1")_$2; shift 2
  SCPIPE_TRACE_PHASES=1 "$B/scpipe" run --demo --demo-on-gpu --demo-cells "$CELLS" --no-umap --no-markers --device gpu \
    "$@" -o "/dev/shm/l_$name.h5ad" --report "$R/$name.json" > "$R/$name.log" 2>&1 || echo "FAILED $name"
  echo "-- $name: $*"
  grep -E "^(neighbors|leiden|total) |^leiden \(|FAILED|rror" "$R/$name.log"
}
files=()
for B in "$@"; do
  for v in ${RUNS:-exact ivf}; do
    run "$B" "$v" --neighbors-method "$v"
    files+=("/dev/shm/l_$(basename "$B")_$v.h5ad")
  done
done
echo "== igraph (scanpy's flavor 'igraph', ${N_ITER:-2} iterations)"
REFERENCE=igraph LEIDENALG=1 timeout "${IGRAPH_S:-300}" python3 scripts/device/tests/leiden_reference.py \
  "${files[@]}" 2>&1 | tee "$R/igraph.txt"
if [ "${LEIDENALG:-1}" != 0 ]; then
  echo "== leidenalg (${N_ITER:-2} iterations)"
  N_ITER=${N_ITER:-2} timeout "${LEIDENALG_S:-300}" python3 scripts/device/tests/leiden_reference.py \
    "${files[@]}" 2>&1 | tee "$R/leidenalg.txt"
fi
