#!/bin/bash
# Exact kNN with tensor-core candidates (issue 31 item 3), in one call:
# 1. tests: gpu_kernels' neighbors tests (the GPU kNN equal to the CPU's; the tensor scan equal
#    to the f32 scan), gpu_split_run's row ranges; the tensor test under compute-sanitizer
#    memcheck;
# 2. scpipe on the demo (cells generated on the GPU, so the output holds no X and writes fast;
#    no UMAP, Leiden or markers) at each of SIZES cells: a fresh process with an empty kernel
#    cache, then one with it filled; the step table's neighbors line (time and note);
# 3. bench-knn (benches/benches/knn.rs): the tensor and f32 scans on the same data in one
#    process, on workload C's points and on the demo's X_pca from step 2; neighbour sets compared.
# PARTS (default "tests scpipe bench") picks the parts.
# Usage: bash scripts/device/benchmarks/knn_tensor.sh BIN_DIR
#   BIN_DIR: scpipe, test-gpu_kernels, test-gpu_split_run, bench-knn. Reports in $OUT/knn/.
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/knn; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-knn
PARTS=${PARTS:-tests scpipe bench}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part tests; then
  echo "== tests"
  REQUIRE_GPU=1 "$B/test-gpu_kernels" neighbors 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
  REQUIRE_GPU=1 "$B/test-gpu_kernels" tensor 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
  REQUIRE_GPU=1 "$B/test-gpu_split_run" knn 2>&1 | grep -E "^test |test result|panicked|assert" | tail -4
  compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 "$B/test-gpu_kernels" tensor 2>&1 \
    | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6
fi
part scpipe && for cells in ${SIZES:-200000 1000000}; do
  for run in cold cached; do
    [ $run = cold ] && rm -rf "$SCPIPE_KERNEL_CACHE"
    "$B/scpipe" run --demo --demo-on-gpu --demo-cells "$cells" --demo-genes 20000 --target-sum 10000 \
      --no-umap --no-leiden --no-markers -o "/dev/shm/knn_$cells.h5ad" --device gpu \
      --report "$R/scpipe_${cells}_$run.json" > "$R/scpipe_${cells}_$run.log" 2>&1 || echo "FAILED"
    echo "-- scpipe $cells cells, $run kernel cache"
    grep -E "^(neighbors|total|pca) |FAILED|rror" "$R/scpipe_${cells}_$run.log"
  done
done
part bench || exit 0
echo "== bench-knn"
"$B/bench-knn" --cells ${BENCH_CELLS:-200000,1000000} --runs ${BENCH_RUNS:-3} --json "$R/knn_workload_c.json" 2>&1 | tee "$R/knn_workload_c.txt"
for cells in ${SIZES:-200000 1000000}; do
  F=/dev/shm/knn_$cells.h5ad
  [ -f "$F" ] || continue
  python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" "$F" "/dev/shm/pcs_$cells.f32"
  "$B/bench-knn" --raw "/dev/shm/pcs_$cells.f32" --dims 50 --runs ${BENCH_RUNS:-3} --json "$R/knn_demo_$cells.json" 2>&1 | tee "$R/knn_demo_$cells.txt"
done
