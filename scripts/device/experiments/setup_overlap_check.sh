#!/bin/bash
# One call on nvidia-h100-x4 after the GPUs' setup moved beside the input's read: the default
# flow on 1 and all GPUs (a warm-up, then two rounds), then the paths that set the GPUs up
# first or draw a memory picture: --memory-timeline, --demo-on-gpu, and ranks started by a
# launcher (launcher.sh). Everything in $OUT/check.log and the reports in $OUT.
# Usage: bash scripts/device/experiments/setup_overlap_check.sh   (the bundle in .gpu-mg/bins.tgz)
set -u
HERE=$(dirname "$0")
B=.gpu-mg/b
mkdir -p $B && tar xzf .gpu-mg/bins.tgz -C $B
OUT=${OUT:-/tmp/out}
source "$HERE/../nccl_env.sh"
run() {  # run NAME GPUS EXTRA...
  local name=$1 n=$2; shift 2
  "$B/scpipe" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus "$n" "$@" \
    -o /dev/shm/$name.h5ad --report "$OUT/$name.json" 2>&1 \
    | grep -E "set up|join|generate|move|stack|neighbors|write h5ad|total"
  rm -f /dev/shm/$name.h5ad
}
{
  echo "== warm-up"; run warm "$N"
  for round in 1 2; do
    for n in 1 "$N"; do echo "== round $round, $n GPU(s)"; run "r$round-g$n" "$n"; done
  done
  echo "== --memory-timeline, 1 GPU, 200,000 cells"
  "$B/scpipe" run --demo --demo-cells 200000 --demo-genes 20000 --gpus 1 \
    --memory-timeline "$OUT/timeline.svg" -o /dev/shm/tl.h5ad 2>&1 | grep -E "set up|generate|total|timeline"
  echo "timeline.svg: $(wc -c < "$OUT/timeline.svg") bytes, $(grep -c '<text' "$OUT/timeline.svg") text labels"
  rm -f /dev/shm/tl.h5ad
  echo "== --demo-on-gpu, 1 GPU, 200,000 cells"
  "$B/scpipe" run --demo --demo-on-gpu --demo-cells 200000 --demo-genes 20000 --gpus 1 \
    -o /dev/shm/gen.h5ad 2>&1 | grep -E "notice|set up|total|error"
  echo "rc ${PIPESTATUS[0]}"; rm -f /dev/shm/gen.h5ad
  echo "== launcher"
  timeout 150 bash "$HERE/../tests/launcher.sh" $B 200000
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
