#!/usr/bin/env bash
# Issue 50's UMAP on the GPU: scpipe's GPU runs on the real datasets and the generated 20k file,
# each run's graph, PCs, labels and layout saved for umap-learn beside it on the development
# machine (scripts/checks/umap_far_cells.py --npz), the farthest cell of each GPU layout, and
# the 1 M default flow's UMAP time and farthest cell.
#   carry: .gpu (gpu-bundle: bin-scpipe), .gpu-data (a copy of ../shared/data)
#   bash scripts/device/tests/umap_layouts.sh [BIN]     (results in $OUT)
set -euo pipefail
BIN=${1:-.gpu/bin/bin-scpipe}
DATA=${SCPIPE_DATA:-.gpu-data}
W=/dev/shm/umap_layouts; rm -rf "$W"; mkdir -p "$W"
run() { # name input [args]
  local name=$1 in=$2; shift 2
  "$BIN" run "$in" -o "$W/$name.h5ad" --device gpu "$@" > "$W/$name.log" 2>&1 || { cat "$W/$name.log"; return 1; }
  grep -E "^umap|^leiden|^total" "$W/$name.log" | sed "s/^/$name: /"
}
run celltypist "$DATA/celltypist_sample_559x32786_counts.h5ad" --min-genes 100 --min-cells 3
run scvi "$DATA/scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad" --min-genes 100 --min-cells 3
"$BIN" generate 20000 2000 -o "$W/gen20k_in.h5ad" --seed 1 > /dev/null
run gen20k "$W/gen20k_in.h5ad"
# conformance/graph_metrics.py's far_cell_ratio (numpy only, as the machine has no scanpy).
export PYTHONPATH="$PWD/conformance${PYTHONPATH:+:$PYTHONPATH}"
python3 - "$W" <<'PY'
import sys, h5py, numpy as np
from graph_metrics import far_cell_ratio
w = sys.argv[1]
for name in ["celltypist", "scvi", "gen20k"]:
    with h5py.File(f"{w}/{name}.h5ad") as f:
        g = f["obsp/connectivities"]
        out = dict(indptr=g["indptr"][()], indices=g["indices"][()], data=g["data"][()],
                   x_umap=f["obsm/X_umap"][()], x_pca=f["obsm/X_pca"][()])
        np.savez_compressed(f"{sys.argv[1]}/{name}_gpu.npz", **out)
    print(f"{name}: GPU layout's farthest cell {far_cell_ratio(out['x_umap']):.2f} (in 99th-percentile units)")
PY
cp "$W"/*_gpu.npz "$OUT/" 2>/dev/null || true
# The 1 M default flow (UMAP beside Leiden and the markers): UMAP's time and farthest cell.
for round in 1 2; do
  "$BIN" run --demo --demo-cells 1000000 --demo-on-gpu --device gpu -o "$W/m1.h5ad" > "$W/m1.log" 2>&1 || { cat "$W/m1.log"; exit 1; }
  grep -E "^umap|^leiden|^total" "$W/m1.log" | sed "s/^/1M round $round: /"
done
python3 - "$W/m1.h5ad" <<'PY'
import sys, h5py
from graph_metrics import far_cell_ratio
with h5py.File(sys.argv[1]) as f:
    print(f"1M: farthest cell {far_cell_ratio(f['obsm/X_umap'][()]):.2f} (in 99th-percentile units)")
PY
