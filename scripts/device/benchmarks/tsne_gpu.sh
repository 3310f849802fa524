#!/bin/bash
# Issue 53's t-SNE on the GPU: its test against the CPU (trustworthiness, the same bits twice)
# with REQUIRE_GPU=1 and under compute-sanitizer memcheck, then `scpipe run --tsne` on `--demo`
# cells for each size of SIZES (default 1000000), one GPU, the kernel cache empty then filled,
# the tsne step's phases traced (SCPIPE_TRACE_PHASES) and its seconds from the report.
# Usage: bash scripts/device/benchmarks/tsne_gpu.sh BIN_DIR   (BIN_DIR: scpipe, test-gpu_kernels,
# data/ with ../shared/data's h5ad files; $OUT gets the logs and reports)
set -u
B=${1:?directory with scpipe and test-gpu_kernels}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export SCPIPE_DATA=$B/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "${TESTS:-1}" = 1 ]; then
  REQUIRE_GPU=1 "$B/test-gpu_kernels" tsne --test-threads=1 --nocapture 2>&1 | tail -8
  REQUIRE_GPU=1 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$B/test-gpu_kernels" tsne --test-threads=1 > "$OUT/memcheck_tsne.txt" 2>&1
  echo "memcheck rc $? ($(grep -c 'Invalid\|leaked' "$OUT/memcheck_tsne.txt") error lines)"
fi
export SCPIPE_KERNEL_CACHE=/tmp/tsne-kernel-cache
rm -rf "$SCPIPE_KERNEL_CACHE"
for size in ${SIZES:-1000000}; do
  for run in cold cached; do
    o=/dev/shm/tsne-$size.h5ad
    rm -f "$o"
    SCPIPE_TRACE_PHASES=1 "$B/scpipe" run --demo --demo-cells "$size" --demo-genes 20000 \
      --gpus 1 --tsne -o "$o" --report "$OUT/$size-$run.json" > "$OUT/$size-$run.log" 2>&1 \
      || echo "$size $run FAILED: $(tail -3 "$OUT/$size-$run.log")"
    python3 - "$OUT/$size-$run.json" "$size $run" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = {x["step"]: x for x in r["steps"]}
t = s.get("tsne", {})
print(f"{sys.argv[2]}: tsne {t.get('seconds', float('nan')):.2f} s ({t.get('note', '')}); "
      f"neighbors {s.get('neighbors', {}).get('seconds', float('nan')):.2f} s; total {r['total_seconds']:.1f} s")
PY
    grep -i 'tsne' "$OUT/$size-$run.log" | grep -i 'phase\|kNN\|descent\|affin' | head -8
  done
done
rm -f /dev/shm/tsne-*.h5ad
