#!/bin/bash
# UMAP, Leiden and marker genes on the GPU machine, in one call:
# 1. tests: gpu_kernels' graph-step tests (umap: the GPU's layout equal to the CPU's bit for bit;
#    leiden: the GPU's partition equal to its host twin's; rank_genes and the radix sort: equal
#    to the CPU's), also under compute-sanitizer memcheck;
# 2. scpipe's whole run on the demo data, on the GPU, at each of SIZES (default "200000
#    1000000") cells, twice (the first compiles the kernels into an empty cache; the second is a
#    fresh process with the cache filled, as users run it), the step table and report kept;
# 3. the graph steps' bench (benches/benches/graph_steps.rs) on the 100,000-cell output with 16
#    and 2 threads (and umap on the GPU), then scanpy on the same file with 2 cores.
# 4. gates: scpipe on the GPU on the real count datasets and a 20,000-cell demo (twice), then
#    conformance/graph_steps.py's comparisons with scanpy on those files
#    (scripts/device/tests/graph_steps_gpu_gates.py).
# PARTS (default "tests scpipe bench") picks the parts, to split them across device calls;
# TESTS the gpu_kernels filters, SCPIPE_ARGS more options for scpipe (e.g. --no-leiden), RUNS=cold
# only the run with an empty kernel cache.
# Usage: bash scripts/device/benchmarks/graph_steps.sh BIN_DIR SITE_DIR
#   BIN_DIR: scpipe, test-gpu_kernels, bench-graph_steps; SITE_DIR: scanpy and its wheels
#   installed (pip --target), or "" to skip scanpy. Reports in $OUT/graph/.
set -u
B=${1:?directory with the binaries}
SITE=${2:-}
OUT=${OUT:-/tmp/out}
R=$OUT/graph; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-graph
PARTS=${PARTS:-tests scpipe bench}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part tests; then
  echo "== tests"
  for t in ${TESTS:-umap leiden rank_genes radix_sort}; do
    REQUIRE_GPU=1 "$B/test-gpu_kernels" "$t" 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
    compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 "$B/test-gpu_kernels" "$t" 2>&1 | grep -E "ERROR SUMMARY|test result" | tail -2
  done
fi
part scpipe && for cells in ${SIZES:-200000 1000000}; do
  for run in cold cached; do
    echo "== scpipe $cells cells, $run kernel cache"
    [ $run = cold ] && rm -rf "$SCPIPE_KERNEL_CACHE"
    "$B/scpipe" run --demo --demo-cells "$cells" --demo-genes 20000 -o "/dev/shm/graph_$cells.h5ad" \
      --device gpu --report "$R/scpipe_${cells}_$run.json" ${SCPIPE_ARGS:-} > "$R/scpipe_${cells}_$run.log" 2>&1 || echo "FAILED"
    grep -E "^(neighbors|umap|leiden|rank_genes_groups|total|pca) |FAILED|rror" "$R/scpipe_${cells}_$run.log"
    [ "${RUNS:-cold cached}" = cold ] && break
  done
  [ "$cells" = 100000 ] || rm -f "/dev/shm/graph_$cells.h5ad"
done
if part gates && [ -n "$SITE" ]; then
  echo "== issue 28's gates on the GPU's output (scanpy on the same files)"
  G=/dev/shm/gates; mkdir -p $G
  for f in celltypist_sample_559x32786_counts scvi_pbmc5k_pbmc10k_400cells_2batches_counts; do
    "$B/scpipe" run "$SCPIPE_DATA/$f.h5ad" -o "$G/$f.h5ad" --device gpu > "$R/gates_$f.log" 2>&1 || echo "FAILED $f"
  done
  for i in 1 2; do
    "$B/scpipe" run --demo --demo-cells 20000 -o "$G/demo20k_$i.h5ad" --device gpu > "$R/gates_demo_$i.log" 2>&1 || echo "FAILED demo $i"
  done
  PYTHONPATH=$SITE timeout ${GATES_DEADLINE:-300} python3 scripts/device/tests/graph_steps_gpu_gates.py \
    $G/celltypist_sample_559x32786_counts.h5ad $G/scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad \
    $G/demo20k_1.h5ad --repeat $G/demo20k_1.h5ad $G/demo20k_2.h5ad 2>&1 | grep -vE "Warning|warn" | tee "$R/gates.txt" | tail -40
fi
part bench || exit 0
F=/dev/shm/graph_100000.h5ad
if [ ! -f "$F" ]; then
  "$B/scpipe" run --demo --demo-cells 100000 --demo-genes 20000 -o "$F" --device gpu > "$R/scpipe_100000.log" 2>&1
fi
echo "== graph steps bench, 100,000 cells"
"$B/bench-graph_steps" "$F" --threads 16 --gpu --repeat 2 | tee "$R/ours_16.jsonl"
taskset -c 0,1 "$B/bench-graph_steps" "$F" --threads 2 --repeat 1 | tee "$R/ours_2.jsonl"
if [ -n "$SITE" ]; then
  echo "== scanpy, 2 cores"
  PYTHONPATH=$SITE NUMBA_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \
    timeout ${SCANPY_DEADLINE:-420} taskset -c 0,1 python3 benches/scanpy_graph_steps.py "$F" | tee "$R/scanpy_2.jsonl"
fi
rm -f "$F"
