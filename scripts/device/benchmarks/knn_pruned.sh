#!/bin/bash
# Exact kNN through pruned lists (issue 31 item 3), in one call:
# 1. tests: gpu_kernels' tensor test (all pairs and pruned lists against the f32 scan) and
#    neighbors tests, the tensor test under compute-sanitizer memcheck;
# 2. bench-knn on workload C's points: the exact kNN over all pairs (tensor cores) against the
#    pruned search with each of VARIANTS, neighbour sets compared;
# 3. scpipe on the demo with --neighbors-method exact at each of SIZES cells (fresh process,
#    cached kernels: as users run it; the first with an empty cache reported apart), then
#    bench-knn on its X_pca.
# PARTS (default "tests bench scpipe") picks the parts.
# Usage: bash scripts/device/benchmarks/knn_pruned.sh BIN_DIR
#   BIN_DIR: scpipe, test-gpu_kernels, bench-knn. Reports in $OUT/pruned/.
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/pruned; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-pruned
PARTS=${PARTS:-tests bench scpipe}
VARIANTS=${VARIANTS:-tensor,pruned,pruned:default/4,pruned:default/16}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part tests; then
  echo "== tests"
  REQUIRE_GPU=1 "$B/test-gpu_kernels" tensor 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
  REQUIRE_GPU=1 "$B/test-gpu_kernels" neighbors 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
  compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 "$B/test-gpu_kernels" tensor 2>&1 \
    | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6
fi
if part bench; then
  echo "== bench-knn, workload C"
  "$B/bench-knn" --cells ${BENCH_CELLS:-200000,1000000} --runs ${BENCH_RUNS:-2} --exact "$VARIANTS" \
    --json "$R/knn_workload_c.json" 2>&1 | tee "$R/knn_workload_c.txt"
fi
part scpipe && for cells in ${SIZES:-200000 1000000}; do
  for run in cold cached cached2; do
    [ $run = cold ] && rm -rf "$SCPIPE_KERNEL_CACHE"
    SCPIPE_TRACE_PHASES=1 "$B/scpipe" run --demo --demo-on-gpu --demo-cells "$cells" --demo-genes 20000 \
      --target-sum 10000 --neighbors-method exact --no-umap --no-leiden --no-markers \
      -o "/dev/shm/pruned_$cells.h5ad" --device gpu \
      --report "$R/scpipe_${cells}_$run.json" > "$R/scpipe_${cells}_$run.log" 2>&1 || echo "FAILED"
    echo "-- scpipe $cells cells, $run kernel cache"
    grep -E "^(neighbors|total) |pruned |FAILED|rror" "$R/scpipe_${cells}_$run.log"
  done
  F=/dev/shm/pruned_$cells.h5ad
  python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" "$F" "/dev/shm/pcs_$cells.f32"
  rm -f "$F"
  "$B/bench-knn" --raw "/dev/shm/pcs_$cells.f32" --dims 50 --runs ${BENCH_RUNS:-2} --exact "$VARIANTS" \
    --json "$R/knn_demo_$cells.json" 2>&1 | tee "$R/knn_demo_$cells.txt"
done
