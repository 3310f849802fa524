#!/bin/bash
# The atlas shape's whole workflow (issue 29 items 2-4), in parts picked by PARTS:
# - pcs:   the showcase's steps up to PCA on ONE GPU (11.4 M cells x 45,854 genes generated on
#          the GPU, HVG 5000, 100 PCs; --no-neighbors); X_pca saved as raw f32 for the plans.
# - plan:  bench-knn --plan on those PCs: each of PLANS' index shapes built (lists, probes
#          chosen for the target recall on the sample, references a cell's search scans),
#          without the search. The shape scanning the fewest references is kept for `e2e`.
# - e2e:   QC through UMAP and Leiden on ONE GPU (markers: skipped by the generated demo,
#          which holds no expression values), the neighbors by the inverted file with the
#          kept number of lists (or the default without `plan`); /usr/bin/time's peak RSS.
# - split: bench-knn --gpus 1,2,4 on the PCs of `pcs`: the inverted file's kNN (defaults)
#          split across 1, 2 and 4 GPUs of this host (SPLIT), each building the same index.
#          (The generated demo itself runs on one GPU: its split runs hold X in host memory.)
# - tests: gpu_kernels' ivf and neighbors tests, gpu_generated's run (the markers on a subset),
#          gpu_split_run's kNN tests; memcheck of ivf (MEMCHECK_S).
# Usage: bash scripts/device/benchmarks/atlas_workflow.sh BIN_DIR (scpipe, bench-knn,
#   test-gpu_kernels, test-gpu_split_run). Reports in $OUT/atlas/, a summary in $OUT/a_all.txt.
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/atlas; mkdir -p "$R"
S=$OUT/a_all.txt
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-atlas
PARTS=${PARTS:-pcs plan e2e}
PLANS=${PLANS:-default/r0.95,6738/r0.95,13476/r0.95}
CELLS=${CELLS:-11400000}
part() { [[ " $PARTS " == *" $1 "* ]]; }
say() { echo "$@" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
ATLAS="--demo --demo-on-gpu --demo-cells $CELLS --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu"
keep_rows() { grep -E "^(calculate|filter|normalize|log1p|highly|subset|scale|pca|neighbors|umap|leiden|rank_genes|write|total) |^ivf |rror|FAILED|Maximum resident|Elapsed"; }
if part tests; then
  say "== tests"
  for t in ${KERNEL_TESTS:-ivf neighbors}; do
    REQUIRE_GPU=1 timeout 200 "$B/test-gpu_kernels" $t --nocapture 2>&1 | grep -E "^test |test result|panicked|assert|recall" | tail -12 | tee -a "$S"
  done
  REQUIRE_GPU=1 timeout 200 "$B/test-gpu_generated" generated_run 2>&1 | grep -E "^test |test result|panicked|assert" | tail -6 | tee -a "$S"
  REQUIRE_GPU=1 timeout 200 "$B/test-gpu_split_run" knn 2>&1 | grep -E "^test |test result|panicked|assert" | tail -4 | tee -a "$S"
  timeout ${MEMCHECK_S:-90} compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 \
    "$B/test-gpu_kernels" ivf 2>&1 | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6 | tee -a "$S"
fi
if part pcs; then
  say "== up to PCA, one GPU"
  /usr/bin/time -v timeout 200 "$B/scpipe" run $ATLAS --gpus 1 --no-neighbors -o /dev/shm/atlas_pcs.h5ad \
    --report "$R/pcs.json" > "$R/pcs.log" 2>&1 || say "FAILED (pcs)"
  keep_rows < "$R/pcs.log" | tee -a "$S"
  python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" \
    /dev/shm/atlas_pcs.h5ad /dev/shm/atlas_pcs.f32 && rm -f /dev/shm/atlas_pcs.h5ad
fi
LISTS=
if part plan && [ -f /dev/shm/atlas_pcs.f32 ]; then
  say "== plans ($PLANS)"
  timeout 200 "$B/bench-knn" --raw /dev/shm/atlas_pcs.f32 --dims 100 --plan --ivf "$PLANS" \
    --json "$R/plans.json" 2>&1 | tee "$R/plans.txt" | grep -E "plan|knn:" | tee -a "$S"
  LISTS=$(grep -oE "plan [^:]+: [0-9]+ lists, [0-9]+ probes, [0-9]+ refs" "$R/plans.txt" \
    | awk '{print $NF-0, $3}' | sort -n | head -1 | awk '{print $2}')
  say "kept: $LISTS lists"
fi
if part e2e; then
  say "== QC through UMAP and Leiden, one GPU${LISTS:+, $LISTS lists}"
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout ${E2E_S:-420} "$B/scpipe" run $ATLAS --gpus 1 --neighbors-method ivf \
    ${LISTS:+--n-lists $LISTS} -o /dev/shm/atlas.h5ad --report "$R/e2e.json" > "$R/e2e.log" 2>&1 || say "FAILED (e2e)"
  keep_rows < "$R/e2e.log" | tee -a "$S"
  rm -f /dev/shm/atlas.h5ad
fi
if part split && [ -f /dev/shm/atlas_pcs.f32 ]; then
  say "== the kNN split across ${SPLIT:-1,2,4} GPUs"
  timeout ${SPLIT_S:-300} "$B/bench-knn" --raw /dev/shm/atlas_pcs.f32 --dims 100 --gpus ${SPLIT:-1,2,4} \
    --ivf default --json "$R/split.json" 2>&1 | tee "$R/split.txt" | grep -E "GPU|knn:" | tee -a "$S"
fi
