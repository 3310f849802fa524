#!/bin/bash
# Session 55, call 1. Carry .gpu-v: scpipe (e8700ac, session 54's end), scpipe_new and
# test-gpu_kernels (+ the cell names written while the cell-graph steps run, ceefe72; + the
# spectral start's dot products reading x once, fe85b01; + the Gram matrix of scaled blocks on
# FP16 tensor cores, 69a408a), data/pbmc68k_reduced.h5ad. Ordered by what matters most, as
# device time was short: tries that started no machine had taken 1,126 s of the 1,800.
# 1. gpu_kernels umap_equals (bits), pca (FP16 Gram), ivf/tensor/neighbors (96fdc08);
# 2. the atlas workflow (PARTS=e2e) with the new build, the write's parts traced: session 54's
#    call 6 (8a2edee: UMAP's epochs queued at most 4 ahead) and this session's changes;
# 3. the 1 M default flow, base and new; memcheck of umap_equals.
set -u
B=.gpu-v
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 60 $B/test-gpu_kernels umap_equals > $L/t_umap.log 2>&1; say "gpu_kernels umap_equals rc=$? $(grep -E 'test result' $L/t_umap.log)"
REQUIRE_GPU=1 timeout 60 $B/test-gpu_kernels pca > $L/t_pca.log 2>&1; say "gpu_kernels pca rc=$? $(grep -E 'test result' $L/t_pca.log)"
grep -E "panicked|off" $L/t_pca.log | head -5 >> "$S"
REQUIRE_GPU=1 timeout 120 $B/test-gpu_kernels ivf tensor neighbors > $L/t_ivf.log 2>&1; say "gpu_kernels ivf tensor neighbors rc=$? $(grep -E 'test result' $L/t_ivf.log)"
grep -E "panicked|FAILED" $L/t_ivf.log | head -5 >> "$S"
mkdir -p $B/new && ln -sf ../scpipe_new $B/new/scpipe
SCPIPE_TRACE_WRITE=1 PARTS=e2e E2E_S=150 bash scripts/device/benchmarks/atlas_workflow.sh $B/new > $L/atlas.log 2>&1
python3 -c "import h5py; f=h5py.File('/dev/shm/atlas.h5ad'); print('atlas output obs:', f['obs'].attrs['_index'], f['obs/_index'].shape, list(f['obs'].attrs['column-order'])[-3:])" 2>&1 | tail -1 | tee -a "$S"
rm -f /dev/shm/atlas.h5ad
grep -vE "module:|kernel:" "$OUT/a_all.txt" | grep -vE "^(ivf|pca) " >> "$S"
grep -E "^pca (first|second)|^umap start \(|^umap epochs|^umap start spectral|^leiden iteration 1, level 0|^leiden labels|^write |^fill |^close" "$OUT/atlas/e2e.log" | head -40 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
pack_logs
for b in scpipe scpipe_new; do
  SCPIPE_TRACE_WRITE=1 SCPIPE_TRACE_PHASES=1 timeout 60 $B/$b run --demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 -o /dev/shm/d.h5ad > $L/d1m_$b.log 2>&1 || say "FAILED (1M $b)"
  say "1M default $b: $(grep -E 'umap epochs epochs|umap start \(' $L/d1m_$b.log | sed 's/ (at.*//' | tr '\n' ' ') | $(grep -E '^(umap|leiden|rank_genes_groups|write|total) ' $L/d1m_$b.log | awk '{printf "%s %s %s; ", $1, $2, $3}')"
done
python3 -c "import anndata as ad; a=ad.read_h5ad('/dev/shm/d.h5ad'); print('anndata reads the new 1M output:', a.shape, a.obs_names[:2].tolist(), list(a.obs.columns)[-3:])" 2>&1 | tail -1 | tee -a "$S"
pack_logs
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/test-gpu_kernels umap_equals > $L/memcheck.log 2>&1; say "memcheck umap rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck.log | tr '\n' ' ')"
pack_logs
