#!/bin/bash
# UMAP beside Leiden and the marker genes (run/beside.rs) against the table's order
# (SCPIPE_BESIDE=0): the default flow on `--demo` cells (generated on the host) for each size of
# SIZES (default 1000000), one GPU, h5ad output in /dev/shm, the two taking turns for ROUNDS rounds
# (default 2) after one warm-up run; then the cell-graph steps' times, the end to end time without
# the input's generation, and the two outputs compared dataset by dataset (compare_h5ad.py).
# Usage: bash scripts/device/benchmarks/beside_ab.sh BIN_DIR (scpipe)   ($OUT gets the reports)
set -u
B=${1:?directory with scpipe}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
run() { # size mode round
  local o=/dev/shm/beside-$2.h5ad
  rm -f "$o"
  SCPIPE_BESIDE=$([ "$2" = beside ] && echo 1 || echo 0) "$B/scpipe" run --demo \
    --demo-cells "$1" --demo-genes 20000 --gpus 1 -o "$o" --report "$OUT/$1-$2-r$3.json" \
    > "$OUT/$1-$2-r$3.log" 2>&1 || echo "$1 $2 round $3 FAILED"
}
for size in ${SIZES:-1000000}; do
  run "$size" beside 0
  for round in $(seq ${ROUNDS:-2}); do
    for mode in in_order beside; do
      run "$size" "$mode" "$round"
    done
  done
  echo "== $size cells: the outputs in order and beside, dataset by dataset"
  python3 "$(dirname "$0")/compare_h5ad.py" /dev/shm/beside-in_order.h5ad /dev/shm/beside-beside.h5ad
  rm -f /dev/shm/beside-*.h5ad
done
python3 - "$OUT" <<'PY'
import json, sys, glob, os
steps = ["neighbors", "umap", "leiden", "rank_genes_groups"]
print(f"{'run':28} " + " ".join(f"{s[:9]:>9}" for s in steps) + f" {'e2e w/o input':>14}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-r*.json"))):
    r = json.load(open(f))
    s = {x["step"]: x["seconds"] for x in r["steps"]}
    gen = s.get("generate demo data", 0.0)
    print(f"{os.path.basename(f)[:-5]:28} " + " ".join(f"{s.get(k, float('nan')):9.2f}" for k in steps)
          + f" {r['total_seconds'] - gen:14.2f}")
    note = next((x["note"] for x in r["steps"] if x["step"] == "umap"), "")
    print(f"    umap: {note}")
PY
