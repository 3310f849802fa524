#!/bin/bash
# Session 55, call 2 (carry .gpu-w: scpipe and test-gpu_generated built with the marker genes of
# the generated run beside UMAP and the h5ad's numeric arrays filled in parallel (uncommitted
# at the call, on 69a408a), rmm/ and rmm-bench.tar.xz as for call1b.sh):
# 1. gpu_generated (the generated run against the in-memory one, markers included);
# 2. the atlas workflow (PARTS=e2e), the write's parts traced;
# 3. call1b.sh: rmm-core's 18 test binaries, issue 55's one-thread cells beside RMM (pinned).
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
L=/tmp/logs/issue55 B=.gpu-w bash benches/results/2026-12-07_session55_gpu/call1b.sh > /dev/null 2>&1
pack_logs
