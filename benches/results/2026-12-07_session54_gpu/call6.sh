#!/bin/bash
# Session 54, call 6 (not run: no device time left; for the next session). Carry .gpu-v rebuilt
# from 8a2edee or later (scpipe, test-gpu_kernels, data/pbmc68k_reduced.h5ad): UMAP's epochs
# queued at most 4 ahead. umap_equals_the_cpu_bit_for_bit, the 1 M default flow once, the atlas
# workflow (PARTS=e2e): Leiden's aggregation should no longer wait for UMAP's epochs.
set -u
B=.gpu-v
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 60 $B/test-gpu_kernels umap_equals > $L/t_umap.log 2>&1; say "gpu_kernels umap_equals rc=$? $(grep -E 'test result' $L/t_umap.log)"
SCPIPE_TRACE_PHASES=1 timeout 60 $B/scpipe run --demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 -o /dev/shm/d.h5ad > $L/d1m.log 2>&1 || say "FAILED (1M)"
say "1M default: $(grep -E 'umap epochs epochs' $L/d1m.log | sed 's/ (at.*//') | $(grep -E '^(umap|leiden|rank_genes_groups|total) ' $L/d1m.log | awk '{printf "%s %s; ", $1, $2}')"
PARTS=e2e E2E_S=120 bash scripts/device/benchmarks/atlas_workflow.sh $B > $L/atlas.log 2>&1
grep -vE "module:|kernel:" "$OUT/a_all.txt" | grep -vE "^(ivf|pca) " >> "$S"
grep -E "^umap epochs|^leiden iteration 1, level 0|^leiden labels" "$OUT/atlas/e2e.log" | head -10 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
pack_logs
