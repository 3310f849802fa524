#!/bin/bash
# The output write of the 1,000,000-cell pipeline, with and without reserving the large
# datasets' places first (SCPIPE_RESERVE_WRITE), on 1 GPU and on every GPU, in one call; then
# the tmpfs write ways of tmpfs_write_bench.py on the same host.
# Usage: bash scripts/device/write_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets write_ab.log and reports)
set -u
B=${1:?bundle directory with scpipe}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/nccl_env.sh"
run() {  # run NAME GPUS
  "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$2" \
    -o /dev/shm/$1.h5ad --report "$OUT/$1.json" 2>&1 | grep -E "move|stack|neighbors|write h5ad|total"
  rm -f /dev/shm/$1.h5ad
}
echo "== warm-up (2 runs, outputs removed)"
run warm-a "$N"; run warm-b 1
for round in 1 2; do
  for n in 1 "$N"; do
    for reserve in 1 0; do
      echo "== round $round: $n GPU(s), SCPIPE_RESERVE_WRITE=$reserve"
      SCPIPE_RESERVE_WRITE=$reserve run "r$round-g$n-reserve$reserve" "$n"
    done
  done
done
echo "== tmpfs write ways, 8 GiB"
python3 scripts/device/tmpfs_write_bench.py /dev/shm 8
