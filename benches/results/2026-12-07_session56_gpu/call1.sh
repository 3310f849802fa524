#!/bin/bash
# Session 56, call 1 (carry .gpu-w: scpipe and the tests built with QC's pass taking what
# filter_genes, HVG and scale read (uncommitted at the call, on 389c0a2), scpipe_base built
# from 389c0a2 (session 55's head: the generated run's markers beside UMAP, the h5ad's numeric
# arrays filled in parallel, never run on a GPU before)):
# 1. gpu_generated (three gene filters, the file run) and gpu_streamed's two kernel tests;
# 2. the atlas workflow (PARTS=e2e), the write's parts traced, new then base.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 150 $B/test-gpu_generated > $L/t_gen.log 2>&1; say "gpu_generated rc=$? $(grep -E 'test result' $L/t_gen.log)"
grep -E "panicked|FAILED" -A3 $L/t_gen.log | head -12 >> "$S"
REQUIRE_GPU=1 timeout 120 $B/test-gpu_streamed streamed_ > $L/t_str.log 2>&1; say "gpu_streamed rc=$? $(grep -E 'test result' $L/t_str.log)"
grep -E "panicked|FAILED" -A3 $L/t_str.log | head -12 >> "$S"
pack_logs
# The kernel cache the atlas runs read, filled by a small run of each build first.
for b in scpipe scpipe_base; do
  SCPIPE_KERNEL_CACHE=/tmp/kc-atlas timeout 60 $B/$b run --demo --demo-on-gpu --demo-cells 50000 --device gpu \
    --gpus 1 --neighbors-method ivf -o /dev/shm/warm.h5ad > $L/warm_$b.log 2>&1; say "warm-up $b rc=$?"
done
for v in new base; do
  mkdir -p $B/$v $L/$v && ln -sf ../$([ $v = new ] && echo scpipe || echo scpipe_base) $B/$v/scpipe
  say "== $v"
  SCPIPE_TRACE_WRITE=1 PARTS=e2e E2E_S=150 bash scripts/device/benchmarks/atlas_workflow.sh $B/$v > $L/$v/atlas.log 2>&1
  grep -E "^(prepare|calculate_qc|filter_|highly|scale|pca|neighbors|umap|leiden|rank_genes_groups|write h5ad|total) |^(pca (first|second)|umap (start \(|epochs)|write )|Maximum resident|Elapsed|rror|FAILED" "$OUT/atlas/e2e.log" | cut -c1-220 >> "$S"
  mv "$OUT"/atlas "$OUT"/a_all.txt $L/$v/ 2>/dev/null
  pack_logs
done
# 3. Issue 55 (rmm/ and rmm-bench.tar.xz as for session 55's call1b.sh: rmm-core's 18 test
# binaries, the one-thread cells beside RMM, pinned), when the call has the time left.
if [ $SECONDS -lt 330 ]; then
  L=/tmp/logs/issue55 B=.gpu-w bash benches/results/2026-12-07_session55_gpu/call1b.sh > /dev/null 2>&1
  L=/tmp/logs; pack_logs
else say "issue 55 part skipped at ${SECONDS}s"; fi
