#!/bin/bash
# Issue 30's scaling gate: the 1,000,000-cell default flow (`--demo`, cells generated on the
# host) written to each output of FORMATS (default "zarr h5ad": OUT.zarr with the default lz4,
# OUT.h5ad) in /dev/shm, on each GPU count of GPUS (default "1 N"), taking turns for ROUNDS
# rounds (default 2); then a table: end to end without the input's generation, the write of X
# and `.raw`, the rest of the output, the total. FLAGS adds scpipe options to every run (e.g.
# "--no-umap --no-leiden --no-markers": the flow of QC through neighbors), TAG names its reports.
# Usage: bash scripts/device/benchmarks/zarr_split.sh BIN_DIR (scpipe)   ($OUT gets the reports)
set -u
B=${1:?directory with scpipe}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/../nccl_env.sh"
GPUS=${GPUS:-1 $N}
for round in $(seq ${ROUNDS:-2}); do
  for n in $GPUS; do
    for fmt in ${FORMATS:-zarr h5ad}; do
      o=/dev/shm/split.$fmt
      "$B/scpipe" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus "$n" -o "$o" \
        ${FLAGS:-} --report "$OUT/${TAG:-}r$round-$fmt-g$n.json" > "$OUT/${TAG:-}r$round-$fmt-g$n.log" 2>&1 || echo "r$round $fmt $n GPUs FAILED"
      rm -rf "$o"
    done
  done
done
TAG=${TAG:-} python3 - "$OUT" <<'PY'
import json, sys, glob, os
print(f"{'run':18} {'end to end w/o input':>21} {'input':>7} {'X and .raw':>11} {'rest':>6} {'total':>7}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], os.environ.get("TAG", "") + "r*-g*.json"))):
    r = json.load(open(f))
    s = {x["step"]: x["seconds"] for x in r["steps"]}
    gen = s.get("generate demo data", 0.0)
    xr = next((v for k, v in s.items() if k.startswith("write") and "X and" in k), float("nan"))
    rest = next((v for k, v in s.items() if k.startswith("write") and "rest" in k), float("nan"))
    print(f"{os.path.basename(f)[:-5]:18} {r['total_seconds'] - gen:21.2f} {gen:7.2f} {xr:11.2f} {rest:6.2f} {r['total_seconds']:7.2f}")
PY
