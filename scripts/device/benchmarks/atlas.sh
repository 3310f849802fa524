#!/usr/bin/env bash
# Issue 10 item 5: the seeds' atlas shape (rapids-singlecell's multi-GPU showcase, 11.4 M cells x
# 45,854 genes) on one GPU, its cells generated on the GPU block by block for every pass
# (scpipe run --demo, no file, X never held), with the showcase's steps: QC, filters, normalize,
# log1p, HVG cell_ranger 5000, scale, PCA(100). Before it: the generated run's tests (with
# compute-sanitizer on the generator) and the streamed tests its refactor touched, and the
# 1.1 M-cell shape generated the same way. Run from the repository root with .gpu carried
# (../shared/tools/gpu-bundle -p integration-tests -p sc-pipeline); $OUT receives the reports.
set -o pipefail
export REQUIRE_GPU=1 SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
B=.gpu/bin
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
for t in gpu_generated gpu_streamed; do
  echo "=== $t"; timeout 240 $B/test-$t --test-threads=1 2>&1 | grep -E "^test |test result|panicked" | head -20
done
echo "=== memcheck: the generator"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test-gpu_generated --test-threads=1 device_generator 2>&1 | grep -E "test result|ERROR SUMMARY|Invalid" | head -5
echo "=== 1.1 M cells x 20,000 genes, generated on the GPU"
/usr/bin/time -v timeout 200 $B/bin-scpipe run --demo --demo-on-gpu --demo-cells 1100000 --demo-genes 20000 \
  --no-neighbors -o /tmp/g1.h5ad --report $OUT/generated_1100k.json 2>&1 | grep -vE "^\s+(Page|Vol|Invol|Swap|File|Socket|Sig|Average|Exit|Minor|Major|Percent|System|User)" | tail -24
rm -f /tmp/g1.h5ad
echo "=== 11.4 M cells x 45,854 genes (the showcase's shape)"
/usr/bin/time -v timeout 420 $B/bin-scpipe run --demo --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 \
  --n-comps 100 --no-neighbors -o /tmp/atlas.h5ad --report $OUT/atlas_11400k.json 2>&1 | grep -vE "^\s+(Page|Vol|Invol|Swap|File|Socket|Sig|Average|Exit|Minor|Major|Percent|System|User)" | tail -26
ls -la /tmp/atlas.h5ad 2>/dev/null
timeout 60 python3 -c "import anndata; a = anndata.read_h5ad('/tmp/atlas.h5ad', backed='r'); print(a); print('X is', a.X)" 2>&1 | tail -12
