#!/bin/bash
# Session 55, call 2 (carry .gpu-w: scpipe and test-gpu_generated built with the marker genes of
# the generated run beside UMAP and the h5ad's numeric arrays filled in parallel (uncommitted
# at the call, on 69a408a; committed as e02f245), scpipe_base (69a408a, call 1's build), rmm/
# and rmm-bench.tar.xz as for call1b.sh):
# 1. gpu_generated (the generated run against the in-memory one, markers included);
# 2. the atlas workflow (PARTS=e2e), the write's parts traced, new then base;
# 3. call1b.sh: rmm-core's 18 test binaries, issue 55's one-thread cells beside RMM (pinned).
# Run as `SHORT=1 bash call2.sh` (1 and the new build's atlas): 247 s of device time were left.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 120 $B/test-gpu_generated > $L/t_gen.log 2>&1; say "gpu_generated rc=$? $(grep -E 'test result' $L/t_gen.log)"
grep -E "panicked|FAILED" $L/t_gen.log | head -5 >> "$S"
SCPIPE_TRACE_WRITE=1 PARTS=e2e E2E_S=150 bash scripts/device/benchmarks/atlas_workflow.sh $B > $L/atlas.log 2>&1
grep -vE "module:|kernel:" "$OUT/a_all.txt" | grep -vE "^(ivf|pca|leiden iteration) " >> "$S"
grep -E "^pca (first|second)|^umap start \(|^umap epochs|^leiden labels|^write |^fill |^close" "$OUT/atlas/e2e.log" | head -40 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
pack_logs
[ -n "${SHORT:-}" ] && exit 0   # SHORT=1: device time for the new build's atlas only
mkdir -p $B/base $L/base && ln -sf ../scpipe_base $B/base/scpipe
say "== base (69a408a)"
PARTS=e2e E2E_S=150 bash scripts/device/benchmarks/atlas_workflow.sh $B/base > $L/base/atlas.log 2>&1
grep -E "^(pca|neighbors|umap|leiden|rank_genes_groups|write h5ad|total) " "$OUT/a_all.txt" >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/base/ 2>/dev/null
pack_logs
L=/tmp/logs/issue55 B=.gpu-w bash benches/results/2026-12-07_session55_gpu/call1b.sh > /dev/null 2>&1
pack_logs
