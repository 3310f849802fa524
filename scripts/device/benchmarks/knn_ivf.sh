#!/bin/bash
# Approximate kNN by an inverted file (issue 29 items 1-2), in one call:
# 1. tests: gpu_kernels' ivf, neighbors and tensor tests, gpu_split_run's kNN tests;
# 2. scpipe on the demo (cells generated on the GPU; no UMAP, Leiden or markers) at each of
#    SIZES cells with --neighbors-method exact, ivf, and ivf with --n-probes $PROBES, each in a
#    fresh process with the kernel cache filled (the first, empty-cache run apart; the second
#    cached ivf run traces its phases, SCPIPE_TRACE_PHASES); the step table's neighbors line;
# 3. bench-knn (benches/benches/knn.rs): the exact kNN as the pipeline runs it and the inverted
#    file at each of IVF's shapes, time and recall over every cell, on workload C's points and
#    on the demo's X_pca from step 2;
# 4. memcheck: the ivf test under compute-sanitizer memcheck (at most MEMCHECK_S seconds).
# PARTS (default "tests scpipe bench memcheck") picks the parts.
# Usage: bash scripts/device/benchmarks/knn_ivf.sh BIN_DIR
#   BIN_DIR: scpipe, test-gpu_kernels, test-gpu_split_run, bench-knn. Reports in $OUT/ivf/.
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/ivf; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-ivf
PARTS=${PARTS:-tests scpipe bench memcheck}
IVF=${IVF:-default,1000/20,1000/100}
PROBES=${PROBES:-35}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part tests; then
  echo "== tests"
  for t in ivf neighbors tensor; do
    REQUIRE_GPU=1 "$B/test-gpu_kernels" $t --nocapture 2>&1 | grep -E "^test |test result|panicked|assert|recall" | tail -8
  done
  REQUIRE_GPU=1 "$B/test-gpu_split_run" knn 2>&1 | grep -E "^test |test result|panicked|assert" | tail -4
fi
part scpipe && for cells in ${SIZES:-200000 1000000}; do
  for method in exact ivf ivf$PROBES; do
    for run in cold cached cached2; do
      [ $run = cold ] && rm -rf "$SCPIPE_KERNEL_CACHE"
      [ $run = cold ] && [ $method != exact ] && continue
      case $method in exact) opts="--neighbors-method exact";; ivf) opts="--neighbors-method ivf";;
        *) opts="--neighbors-method ivf --n-probes $PROBES";; esac
      trace=; [ $run = cached2 ] && [ $method != exact ] && trace=1
      SCPIPE_TRACE_PHASES=$trace "$B/scpipe" run --demo --demo-on-gpu --demo-cells "$cells" --demo-genes 20000 --target-sum 10000 \
        --no-umap --no-leiden --no-markers $opts -o "/dev/shm/ivf_$cells.h5ad" \
        --device gpu --report "$R/scpipe_${cells}_${method}_$run.json" > "$R/scpipe_${cells}_${method}_$run.log" 2>&1 || echo "FAILED"
      echo "-- scpipe $cells cells, $method, $run kernel cache"
      grep -E "^(neighbors|total) |^ivf |FAILED|rror" "$R/scpipe_${cells}_${method}_$run.log"
    done
  done
done
if part bench; then
echo "== bench-knn"
"$B/bench-knn" --cells ${BENCH_CELLS:-200000,1000000} --runs ${BENCH_RUNS:-3} --no-f32 --ivf "$IVF" \
  --json "$R/knn_workload_c.json" 2>&1 | tee "$R/knn_workload_c.txt"
for cells in ${SIZES:-200000 1000000}; do
  F=/dev/shm/ivf_$cells.h5ad
  [ -f "$F" ] || continue
  python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" "$F" "/dev/shm/pcs_$cells.f32"
  "$B/bench-knn" --raw "/dev/shm/pcs_$cells.f32" --dims 50 --runs ${BENCH_RUNS:-3} --no-f32 --ivf "$IVF" \
    --json "$R/knn_demo_$cells.json" 2>&1 | tee "$R/knn_demo_$cells.txt"
done
fi
if part memcheck; then
  echo "== memcheck"
  timeout ${MEMCHECK_S:-120} compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 \
    "$B/test-gpu_kernels" ivf 2>&1 | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6
fi
