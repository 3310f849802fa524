#!/bin/bash
# Session 55, call 1. Carry .gpu-v: scpipe (e8700ac, session 54's end), scpipe_new and
# test-gpu_kernels (+ the cell names written while the cell-graph steps run, ceefe72; + the
# spectral start's dot products reading x once, fe85b01; + the Gram matrix of scaled blocks on
# FP16 tensor cores, uncommitted at the call), rmm/ = rmm-core's 18 test binaries,
# rmm-bench.tar.xz = .rmm-bench with ours/ from e8700ac, data/pbmc68k_reduced.h5ad.
# 1. gpu_kernels umap_equals (bits), pca (FP16 Gram), ivf/tensor/neighbors (96fdc08); memcheck;
# 2. the 1 M default flow, base and new; the atlas workflow (PARTS=e2e) with the new build,
#    the write's parts traced: session 54's call 6 (8a2edee:
#    UMAP's epochs queued at most 4 ahead) and this session's changes;
# 3. rmm-core's 18 test binaries with REQUIRE_GPU=1;
# 4. issue 55 beside RMM, pinned to core 3 (PIN=3 NOGRID=1 ROUNDS=1): 0fc1f29, 765dcf3.
set -u
B=.gpu-v
source scripts/device/call_preamble.sh
for f in $B/rmm/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
tar -C . -xJf $B/rmm-bench.tar.xz
REQUIRE_GPU=1 timeout 60 $B/test-gpu_kernels umap_equals > $L/t_umap.log 2>&1; say "gpu_kernels umap_equals rc=$? $(grep -E 'test result' $L/t_umap.log)"
REQUIRE_GPU=1 timeout 60 $B/test-gpu_kernels pca > $L/t_pca.log 2>&1; PCA_RC=$?; say "gpu_kernels pca rc=$PCA_RC $(grep -E 'test result' $L/t_pca.log)"
grep -E "panicked|off" $L/t_pca.log | head -5 >> "$S"
REQUIRE_GPU=1 timeout 200 $B/test-gpu_kernels ivf tensor neighbors > $L/t_ivf.log 2>&1; say "gpu_kernels ivf tensor neighbors rc=$? $(grep -E 'test result' $L/t_ivf.log)"
grep -E "panicked|FAILED" $L/t_ivf.log | head -5 >> "$S"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/test-gpu_kernels umap_equals > $L/memcheck.log 2>&1; say "memcheck umap rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck.log | tr '\n' ' ')"
for b in scpipe scpipe_new; do
  SCPIPE_TRACE_WRITE=1 SCPIPE_TRACE_PHASES=1 timeout 60 $B/$b run --demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 -o /dev/shm/d.h5ad > $L/d1m_$b.log 2>&1 || say "FAILED (1M $b)"
  say "1M default $b: $(grep -E 'umap epochs epochs|umap start \(' $L/d1m_$b.log | sed 's/ (at.*//' | tr '\n' ' ') | $(grep -E '^(umap|leiden|rank_genes_groups|write|total) ' $L/d1m_$b.log | awk '{printf "%s %s %s; ", $1, $2, $3}')"
done
python3 -c "import anndata as ad; a=ad.read_h5ad('/dev/shm/d.h5ad'); print('anndata reads the new 1M output:', a.shape, a.obs_names[:2].tolist(), list(a.obs.columns)[-3:])" 2>&1 | tail -1 | tee -a "$S"
mkdir -p $B/new && ln -sf ../scpipe_new $B/new/scpipe
SCPIPE_TRACE_WRITE=1 PARTS=e2e E2E_S=150 bash scripts/device/benchmarks/atlas_workflow.sh $B/new > $L/atlas.log 2>&1
python3 -c "import h5py; f=h5py.File('/dev/shm/atlas.h5ad'); print('atlas output obs:', f['obs'].attrs['_index'], f['obs/_index'].shape, list(f['obs'].attrs['column-order'])[-3:])" 2>&1 | tail -1 | tee -a "$S"
grep -vE "module:|kernel:" "$OUT/a_all.txt" | grep -vE "^(ivf|pca) " >> "$S"
grep -E "^umap epochs|^umap start spectral|^leiden iteration 1, level 0|^leiden labels|^write |^fill |^close" "$OUT/atlas/e2e.log" | head -30 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
for t in $B/rmm/*; do [[ $t == *.xz ]] && continue
  REQUIRE_GPU=1 timeout 120 $t > $L/rmm_$(basename $t).log 2>&1; echo "$(basename $t) rc=$? $(grep -E 'test result' $L/rmm_$(basename $t).log | tail -1)" >> $L/rmm_tests.txt
done
say "rmm-core tests: $(grep -c 'rc=0' $L/rmm_tests.txt) of $(wc -l < $L/rmm_tests.txt) rc=0"; grep -v 'rc=0' $L/rmm_tests.txt >> "$S"
PIN=3 NOGRID=1 ROUNDS=1 timeout 240 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
cat "$OUT"/sub_allocators_pinned.txt >> "$S"
mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
pack_logs
